-- Item texts are kept compressed (storage/textcodec.py): each text of PLAIN_CHARS characters
-- or more becomes a zstd frame in a BLOB, read back by its type (at 100k benchmark items the
-- texts' 145 MB become about 74). The packing is Python's: driver.py runs `tables.pack_texts`
-- right after this file, in the same transaction, with the change log's trigger held off
-- (the items' words are unchanged: no derived index needs to take them in again). The file
-- does not shrink by itself: SQLite reuses the freed pages for later writes (VACUUM returns
-- them to the file system).
SELECT 1;
