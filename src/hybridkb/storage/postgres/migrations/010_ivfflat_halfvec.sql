-- The IVFFlat index is built over the vectors cast to half precision (storage/postgres/ann.py,
-- issue #16, eighth pass): half the pages per probed list, measured 0.7x the time of a probe
-- at 1,000,000 items. Searches order by the half-precision expression, which the old index
-- cannot serve, so it goes with its measurement; the next write of vectors (or `optimize()`,
-- or `hybridkb repair`) builds the new one. Until then searches scan exactly.
DROP INDEX IF EXISTS item_vectors_ivf;
DELETE FROM meta WHERE key LIKE 'pg\_ivf\_%';
