-- The vector index is IVFFlat (storage/postgres/ann.py, issue #16): on the benchmark's
-- million items pgvector's HNSW graph held recall@10 0.755 where IVFFlat with measured
-- probes holds 0.95 and more, and builds several times faster. The HNSW index goes; the
-- next write of vectors (or `optimize()`, or `hybridkb repair`) builds the new one once the
-- store holds `vector_index_min_rows` vectors. Until then searches scan exactly.
DROP INDEX IF EXISTS item_vectors_hnsw;
