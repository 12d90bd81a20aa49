-- Cheaper writes to the BM25 index (migration 003) for bulk loads.
--
-- 1. Lexemes and corpora of the index compare bytewise (COLLATE "C"). Their order means
--    nothing to a reader (they are only ever looked up by equality), but every insert into
--    the index's btrees and every sort of a merge compared them under the database's
--    collation (a libc collation calls strcoll: 4x slower sorts measured under C.UTF-8).
-- 2. A merge rewrites only blocks that are not yet full (under 4,096 postings), in rowid
--    order, concatenating whole blocks into parts of about 8,192 postings: a full block is
--    never read or written again, so each merge costs what was written since the last one
--    rather than the whole index (the merge after a 100,000-item load took 180 s).
ALTER TABLE bm25_blocks ALTER COLUMN lexeme TYPE text COLLATE "C",
                        ALTER COLUMN corpus TYPE text COLLATE "C";
ALTER TABLE bm25_buckets ALTER COLUMN lexeme TYPE text COLLATE "C",
                         ALTER COLUMN corpus TYPE text COLLATE "C";

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
               (sum(cardinality(b.rowids)) OVER (PARTITION BY b.lexeme, b.corpus, b.bucket
                    ORDER BY b.lo, b.ctid ROWS UNBOUNDED PRECEDING)
                - cardinality(b.rowids)) / 8192 AS part
        FROM bm25_blocks b WHERE cardinality(b.rowids) < 4096
    ), gone AS (
        DELETE FROM bm25_blocks b USING small s WHERE b.ctid = s.tid AND s.blocks > 1
        RETURNING b.lexeme, b.corpus, b.bucket, b.lo, b.hi, b.rowids, b.nt, b.nb, b.dl, s.part
    )
    INSERT INTO bm25_blocks (lexeme, corpus, bucket, lo, hi, rowids, nt, nb, dl)
    SELECT g.lexeme, g.corpus, g.bucket, min(g.lo), max(g.hi), hybridkb_cat(g.rowids ORDER BY g.lo),
           hybridkb_cat(g.nt ORDER BY g.lo), hybridkb_cat(g.nb ORDER BY g.lo),
           hybridkb_cat(g.dl ORDER BY g.lo)
    FROM gone g GROUP BY g.lexeme, g.corpus, g.bucket, g.part;
    GET DIAGNOSTICS merged = ROW_COUNT;
    RETURN merged;
END
$$;
