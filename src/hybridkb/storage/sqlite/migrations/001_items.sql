-- Items, the FTS5 index kept in sync by triggers, and store metadata.
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE items (
    rowid            INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    corpus           TEXT NOT NULL,
    title            TEXT,
    text             TEXT NOT NULL,
    kind             TEXT,
    scope            TEXT,
    repo             TEXT,
    namespace        TEXT,
    source_url       TEXT,
    metadata         TEXT NOT NULL DEFAULT '{}',
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    expires_at       REAL,
    access_count     INTEGER NOT NULL DEFAULT 0,
    last_accessed_at REAL,
    stale            INTEGER NOT NULL DEFAULT 0,
    content_hash     TEXT NOT NULL,
    embedded_hash    TEXT
);
CREATE INDEX items_corpus ON items (corpus);
CREATE INDEX items_expires ON items (expires_at) WHERE expires_at IS NOT NULL;

CREATE VIRTUAL TABLE items_fts USING fts5 (
    title, text,
    content = 'items', content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER items_fts_insert AFTER INSERT ON items BEGIN
    INSERT INTO items_fts (rowid, title, text) VALUES (new.rowid, new.title, new.text);
END;
CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, title, text)
    VALUES ('delete', old.rowid, old.title, old.text);
END;
CREATE TRIGGER items_fts_update AFTER UPDATE OF title, text ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, title, text)
    VALUES ('delete', old.rowid, old.title, old.text);
    INSERT INTO items_fts (rowid, title, text) VALUES (new.rowid, new.title, new.text);
END;
