-- item_keys (migration 005) mapped the rowids a search's indexes return to item ids. A
-- search now names items by rowid until it reads the few dozen it shows or weighs, by
-- the items table's own key (storage/contract.py, Key), so the copy and the three
-- triggers every write paid for it go.
DROP TRIGGER IF EXISTS item_keys_insert;
DROP TRIGGER IF EXISTS item_keys_delete;
DROP TRIGGER IF EXISTS item_keys_update;
DROP TABLE IF EXISTS item_keys;
