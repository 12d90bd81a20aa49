-- The vectors of queries the store was asked (never their text): a bounded sample, most
-- recent kept (storage/asked.py). A vector index measures its recall on them when it is
-- built, instead of on pseudo-queries made from the items, which cannot know how far a
-- store's real queries sit from its items (NFCorpus's sit farther than any pseudo-query).
CREATE TABLE IF NOT EXISTS query_vectors (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    digest INTEGER NOT NULL UNIQUE,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    asked_at REAL NOT NULL
);
