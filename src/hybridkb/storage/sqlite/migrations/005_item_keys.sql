-- rowid -> id in a narrow table of its own. A search maps the few hundred rowids its
-- indexes return to item ids; read from `items`, each lookup lands on a page of a wide
-- table (texts inline) that is rarely in the cache: 300 random rowids 1.0 ms at 100k
-- items, 0.24 ms from this table (docs/benchmarks.md, sixth pass). Kept by triggers in
-- the transaction of every write, so it never disagrees with the items.
CREATE TABLE item_keys (
    rowid INTEGER PRIMARY KEY,
    id    TEXT NOT NULL
);
INSERT INTO item_keys (rowid, id) SELECT rowid, id FROM items;

CREATE TRIGGER item_keys_insert AFTER INSERT ON items BEGIN
    INSERT OR REPLACE INTO item_keys (rowid, id) VALUES (new.rowid, new.id);
END;
CREATE TRIGGER item_keys_delete AFTER DELETE ON items BEGIN
    DELETE FROM item_keys WHERE rowid = old.rowid;
END;
CREATE TRIGGER item_keys_update AFTER UPDATE OF rowid, id ON items BEGIN
    DELETE FROM item_keys WHERE rowid = old.rowid;
    INSERT OR REPLACE INTO item_keys (rowid, id) VALUES (new.rowid, new.id);
END;
