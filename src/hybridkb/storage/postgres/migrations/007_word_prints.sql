-- Each item's word print (dedup.word_print: a stable hash of its text's word set), written
-- with the item, as on SQLite (its migration 006). Rows written before keep NULL, and a
-- search computes their print as before.
ALTER TABLE items ADD COLUMN word_print bigint;
