-- Vectors move from a sqlite-vec `vec0` virtual table into a plain table of float32 blobs
-- by rowid (tables.create_vectors). Searches never ask vec0 for its KNN (the derived vector
-- base answers), and its per-row reads cost four times a plain table's: 44-47 against 11-12
-- us a vector when a base is built (30,000 vectors), 44-61 against 25-33 us a write. The copy needs to
-- know whether the store has a vector table at all, so it is Python's: driver.py runs
-- `tables.plain_vectors` right after this file, in the same transaction.
SELECT 1;
