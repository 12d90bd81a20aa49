-- Cheaper writes to the BM25 index (migration 003), for bulk loads above all.
--
-- 1. Each block counts its own postings (`n`) and `bm25_buckets` goes: df and the bucket
--    counts are sums of `n` over the blocks (an index-only scan), so a write appends block
--    rows and upserts nothing (the bucket upsert was a third of the index's write cost; it
--    also made concurrent writers share rows, hence its shards).
-- 2. Lexemes and corpora of the index compare bytewise (COLLATE "C"). Their order means
--    nothing to a reader (they are only ever looked up by equality), but every insert into
--    the index's btree and every sort of a merge compared them under the database's
--    collation (a libc collation calls strcoll: 4x slower sorts measured under C.UTF-8).
-- 3. A merge rewrites only blocks that are not yet full (under 4,096 postings), in rowid
--    order, concatenating whole blocks into parts of about 8,192 postings: a full block is
--    never rewritten, and no posting is unnested or sorted (the merge after a
--    100,000-item load took 180 s).
ALTER TABLE bm25_blocks ALTER COLUMN lexeme TYPE text COLLATE "C",
                        ALTER COLUMN corpus TYPE text COLLATE "C",
                        ADD COLUMN n integer NOT NULL DEFAULT 0;
UPDATE bm25_blocks SET n = coalesce(cardinality(rowids), 0);
ALTER TABLE bm25_blocks ALTER COLUMN n DROP DEFAULT;
DROP INDEX bm25_blocks_key;
CREATE INDEX bm25_blocks_key ON bm25_blocks (lexeme, corpus, bucket, lo) INCLUDE (n);
DROP TABLE bm25_buckets;

CREATE OR REPLACE FUNCTION hybridkb_postings(p_rowid bigint, p_corpus text, p_tsv tsvector)
    RETURNS TABLE (lexeme text, corpus text, bucket integer, rowid bigint, nt smallint,
                   nb smallint, dl integer)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT c.lexeme COLLATE "C", p_corpus COLLATE "C",
           ((CASE WHEN c.nt < 4 THEN c.nt WHEN c.nt < 8 THEN 4 ELSE 5 END) * 16
            + (CASE WHEN c.nb < 8 THEN c.nb WHEN c.nb < 12 THEN 8 WHEN c.nb < 16 THEN 9
                    WHEN c.nb < 24 THEN 10 WHEN c.nb < 32 THEN 11 WHEN c.nb < 64 THEN 12
                    WHEN c.nb < 128 THEN 13 ELSE 14 END)) * 128 + c.dlc,
           p_rowid, c.nt::smallint, c.nb::smallint, c.dl
    FROM (SELECT u.lexeme, d.dl, d.dlc, x.nt, greatest(coalesce(cardinality(u.positions), 1), 1) - x.nt AS nb
          FROM (SELECT length(p_tsv) AS dl,
                       least(127, floor(2 * ln(greatest(length(p_tsv), 1)::float8)
                                        / ln(2.0::float8))::integer) AS dlc
                OFFSET 0) AS d,
               unnest(p_tsv) AS u,
               LATERAL (SELECT coalesce(cardinality(array_positions(u.weights, 'A')), 0) AS nt
                        OFFSET 0) AS x
          OFFSET 0) AS c
    $$;

-- As in migration 003, with `n` written and no bucket counts to keep.
CREATE OR REPLACE FUNCTION hybridkb_bm25_sql(action text, source text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE action WHEN 'add' THEN format($f$
    INSERT INTO bm25_blocks (lexeme, corpus, bucket, lo, hi, n, rowids, nt, nb, dl)
    SELECT p.lexeme, p.corpus, p.bucket, min(p.rowid), max(p.rowid), count(*), array_agg(p.rowid),
           array_agg(p.nt), array_agg(p.nb), array_agg(p.dl)
    FROM %s AS d, hybridkb_postings(d.rowid, d.corpus, d.tsv) AS p
    GROUP BY p.lexeme, p.corpus, p.bucket
    $f$, source) ELSE format($f$
    WITH gone AS (
        SELECT p.lexeme, p.corpus, p.bucket, array_agg(p.rowid) AS dead,
               min(p.rowid) AS lo, max(p.rowid) AS hi
        FROM %s AS d, hybridkb_postings(d.rowid, d.corpus, d.tsv) AS p
        GROUP BY p.lexeme, p.corpus, p.bucket
    )
    UPDATE bm25_blocks b SET (rowids, nt, nb, dl, n) = (
        SELECT array_agg(e.r ORDER BY e.o), array_agg(e.t ORDER BY e.o),
               array_agg(e.x ORDER BY e.o), array_agg(e.d ORDER BY e.o), count(*)
        FROM unnest(b.rowids, b.nt, b.nb, b.dl) WITH ORDINALITY AS e (r, t, x, d, o)
        WHERE e.r <> ALL (g.dead))
    FROM gone g
    WHERE b.lexeme = g.lexeme AND b.corpus = g.corpus AND b.bucket = g.bucket
      AND b.lo <= g.hi AND b.hi >= g.lo AND b.rowids && g.dead
    $f$, source) END
    $$;

-- Arrays concatenated in the aggregate's order (a merge joins whole blocks, no unnest).
CREATE AGGREGATE hybridkb_cat(anycompatiblearray) (sfunc = array_cat, stype = anycompatiblearray);

CREATE OR REPLACE FUNCTION hybridkb_bm25_compact() RETURNS bigint LANGUAGE plpgsql
    SET work_mem = '256MB' AS $$
DECLARE
    merged bigint;
BEGIN
    WITH small AS (
        SELECT b.ctid AS tid,
               count(*) OVER (PARTITION BY b.lexeme, b.corpus, b.bucket) AS blocks,
               (sum(b.n) OVER (PARTITION BY b.lexeme, b.corpus, b.bucket
                    ORDER BY b.lo, b.ctid ROWS UNBOUNDED PRECEDING) - b.n) / 8192 AS part
        FROM bm25_blocks b WHERE b.n < 4096 AND b.rowids IS NOT NULL
    ), gone AS (
        DELETE FROM bm25_blocks b USING small s WHERE b.ctid = s.tid AND s.blocks > 1
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
