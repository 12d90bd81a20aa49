-- The change log: every committed write to an item gets a sequence number, so each
-- derived index (storage/indexes/) records the sequence it reflects and catches up from
-- here. op: 'i' inserted, 'u' searchable fields changed, 'v' vector changed, 'd' deleted.
-- AUTOINCREMENT: a number is never reused, even after the log is pruned.
CREATE TABLE changes (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    item_rowid INTEGER NOT NULL,
    op         TEXT NOT NULL
);

CREATE TRIGGER items_log_insert AFTER INSERT ON items BEGIN
    INSERT INTO changes (item_rowid, op) VALUES (new.rowid, 'i');
END;
CREATE TRIGGER items_log_delete AFTER DELETE ON items BEGIN
    INSERT INTO changes (item_rowid, op) VALUES (old.rowid, 'd');
END;
CREATE TRIGGER items_log_update AFTER UPDATE OF corpus, title, text, kind, scope, repo, namespace,
    metadata, created_at, updated_at, expires_at, stale ON items BEGIN
    INSERT INTO changes (item_rowid, op) VALUES (new.rowid, 'u');
END;
CREATE TRIGGER items_log_vector AFTER UPDATE OF embedded_hash ON items BEGIN
    INSERT INTO changes (item_rowid, op) VALUES (new.rowid, 'v');
END;

-- One full-text index: BM25 moves to the tantivy index beside the file, so writes stop
-- paying for FTS5 too (measured in docs/benchmarks.md).
DROP TRIGGER IF EXISTS items_fts_insert;
DROP TRIGGER IF EXISTS items_fts_delete;
DROP TRIGGER IF EXISTS items_fts_update;
DROP TABLE IF EXISTS items_fts;
DROP VIEW IF EXISTS items_fts_source;

-- Derived indexes on disk name the store they belong to: a copied or replaced .db file
-- never answers from another store's index.
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))))
    ON CONFLICT (key) DO NOTHING;

-- Derived indexes published as files (the vector base): which generation is current and
-- the change-log sequence it reflects. Readers compare it before each search.
CREATE TABLE derived_indexes (
    name       TEXT PRIMARY KEY,
    generation TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    dim        INTEGER NOT NULL
);
