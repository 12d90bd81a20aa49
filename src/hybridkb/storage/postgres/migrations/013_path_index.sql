-- Path filters find their rows through an index (storage/postgres/sql.py, issue #16, tenth
-- pass): a pattern anchored at the root (`src/**/*.py`, `docs/`) is also written as a
-- prefix (`metadata ->> 'path' LIKE 'src/%'`), which this index serves and the planner
-- estimates from the statistics ANALYZE keeps on the index's expression; the pattern's
-- regex still decides. Not a partial index: the planner ignores a partial index's
-- statistics, and guessed 0.5% for a prefix that kept 99% of the rows.
CREATE INDEX IF NOT EXISTS items_path ON items ((metadata ->> 'path') text_pattern_ops);
