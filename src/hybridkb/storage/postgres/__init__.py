"""The server dialect: PostgreSQL, tsvector BM25 in SQL, pgvector IVFFlat."""
