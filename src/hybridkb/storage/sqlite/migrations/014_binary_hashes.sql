-- An item's content hash (and the hash its vector was made from) is kept as its 16 bytes,
-- not 32 hex digits (sqlite/tables.py: hash_blob): at 1M items 32 MB less of the items
-- table. The conversion is Python's: driver.py runs `tables.binary_hashes` right after this
-- file, in the same transaction, with the change log's vector trigger held off (no vector
-- changes). The rows shrink in place: the next `optimize()` VACUUMs the file.
SELECT 1;
