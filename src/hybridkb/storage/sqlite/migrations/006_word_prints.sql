-- Each item's word print (dedup.word_print: a stable hash of its text's word set), written
-- with the item. A search collapses identical word sets among the few dozen items it
-- reads; tokenizing each text to find them was about a millisecond of a first-time
-- search at 100k items (docs/benchmarks.md). Rows written before this migration keep
-- NULL, and a search computes their print as before.
ALTER TABLE items ADD COLUMN word_print INTEGER;
