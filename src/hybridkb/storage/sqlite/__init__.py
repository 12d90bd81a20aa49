"""The embedded dialect: one SQLite file, FTS5 for BM25, sqlite-vec for vectors."""
