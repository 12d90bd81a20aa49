-- Merging the BM25 index's blocks only where a bucket has many of them (issue #16, ingest).
--
-- A query reads every block of a bucket; what merging saves is the per-block overhead of
-- many tiny blocks (a write statement of 2,000 items adds one block per bucket, so a store
-- loaded in such batches holds dozens per bucket). A bulk load in large batches (50,000
-- items) leaves one or two blocks per bucket, and merging those rewrote almost every
-- posting of the index for nothing measurable (100,000 items in two batches: 36 s of the
-- 280 s load). `min_blocks`: merge the small blocks (under 4,096 postings) of a
-- (lexeme, corpus, bucket) only when it holds at least that many of them; the store's
-- merges as it doubles pass 4, `optimize()` passes 2 (everything mergeable, as before).
-- Buckets to merge are found first (one pass over the index's keys), so a merge that finds
-- nothing to do no longer sorts every small block.
DROP FUNCTION hybridkb_bm25_compact();

CREATE FUNCTION hybridkb_bm25_compact(min_blocks integer DEFAULT 2) RETURNS bigint
    LANGUAGE plpgsql SET work_mem = '256MB' AS $$
DECLARE
    merged bigint;
BEGIN
    WITH keys AS (
        SELECT b.lexeme, b.corpus, b.bucket FROM bm25_blocks b
        WHERE b.n < 4096 AND b.rowids IS NOT NULL
        GROUP BY b.lexeme, b.corpus, b.bucket HAVING count(*) >= greatest(min_blocks, 2)
    ), small AS (
        SELECT b.ctid AS tid,
               (sum(b.n) OVER (PARTITION BY b.lexeme, b.corpus, b.bucket
                    ORDER BY b.lo, b.ctid ROWS UNBOUNDED PRECEDING) - b.n) / 8192 AS part
        FROM bm25_blocks b
        JOIN keys k ON b.lexeme = k.lexeme AND b.corpus = k.corpus AND b.bucket = k.bucket
        WHERE b.n < 4096 AND b.rowids IS NOT NULL
    ), gone AS (
        DELETE FROM bm25_blocks b USING small s WHERE b.ctid = s.tid
        RETURNING b.lexeme, b.corpus, b.bucket, b.lo, b.hi, b.n, b.rowids, b.nt, b.nb, b.dl, s.part
    )
    INSERT INTO bm25_blocks (lexeme, corpus, bucket, lo, hi, n, rowids, nt, nb, dl)
    SELECT g.lexeme, g.corpus, g.bucket, min(g.lo), max(g.hi), sum(g.n),
           hybridkb_cat(g.rowids ORDER BY g.lo),
           hybridkb_cat(g.nt ORDER BY g.lo), hybridkb_cat(g.nb ORDER BY g.lo),
           hybridkb_cat(g.dl ORDER BY g.lo)
    FROM gone g GROUP BY g.lexeme, g.corpus, g.bucket, g.part;
    GET DIAGNOSTICS merged = ROW_COUNT;
    RETURN merged;
END
$$;
