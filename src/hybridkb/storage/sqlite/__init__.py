"""The embedded dialect: one SQLite file (the system of record, vectors in sqlite-vec) and
its derived search indexes (storage/indexes: tantivy BM25, a memory-mapped vector base)."""
