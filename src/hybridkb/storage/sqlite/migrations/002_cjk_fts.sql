-- Chinese, Japanese and Korean words inside unspaced text: the FTS5 index reads its rows
-- through a view that applies hybridkb_fts() (textquery.cjk_expand, registered on every
-- connection by driver.connect) to the title and text, so each CJK run is indexed as its
-- overlapping bigrams; other text passes unchanged. 'rebuild' and 'integrity-check' read the
-- same view, so the index and its source still agree by construction.
DROP TRIGGER items_fts_insert;
DROP TRIGGER items_fts_delete;
DROP TRIGGER items_fts_update;
DROP TABLE items_fts;

CREATE VIEW items_fts_source AS
    SELECT rowid AS rowid, hybridkb_fts(title) AS title, hybridkb_fts(text) AS text FROM items;

CREATE VIRTUAL TABLE items_fts USING fts5 (
    title, text,
    content = 'items_fts_source', content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER items_fts_insert AFTER INSERT ON items BEGIN
    INSERT INTO items_fts (rowid, title, text)
    VALUES (new.rowid, hybridkb_fts(new.title), hybridkb_fts(new.text));
END;
CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, title, text)
    VALUES ('delete', old.rowid, hybridkb_fts(old.title), hybridkb_fts(old.text));
END;
CREATE TRIGGER items_fts_update AFTER UPDATE OF title, text ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, title, text)
    VALUES ('delete', old.rowid, hybridkb_fts(old.title), hybridkb_fts(old.text));
    INSERT INTO items_fts (rowid, title, text)
    VALUES (new.rowid, hybridkb_fts(new.title), hybridkb_fts(new.text));
END;

INSERT INTO items_fts (items_fts) VALUES ('rebuild');
