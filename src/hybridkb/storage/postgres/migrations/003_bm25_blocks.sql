-- An impact-ordered BM25 index in plain tables, so that a top-k full-text query reads the
-- best postings of each term first and stops early (storage/postgres/topk.py) instead of
-- scoring every document that holds any query term.
--
-- A posting is (lexeme, document): its count in the title (positions weighted 'A'), in the
-- text ('B'), and the document's length (distinct lexemes, as BM25 in sql.py). Postings go
-- to a bucket that is a pure function of those three numbers: the title count and text
-- count classes (exact for small counts) and the length class (4 per octave). A bucket's
-- best BM25 weight is therefore known without reading it -- highest counts, shortest length
-- of its class -- under any current N, df and average length: weights are computed at query
-- time from the stored counts, so the index never goes stale as statistics move.
--
-- bm25_blocks: one row per (lexeme, corpus, bucket) per write statement, the postings as
-- parallel arrays (a batch of 2,000 items writes ~10x fewer rows than it has postings).
-- bm25_buckets: how many postings each (lexeme, corpus, bucket) holds (df is their sum),
-- sharded by server process like corpus_stats. Both are kept exact by the triggers below in
-- the transaction of every write.

CREATE TABLE bm25_blocks (
    lexeme text NOT NULL,
    corpus text NOT NULL,
    bucket integer NOT NULL,
    lo     bigint NOT NULL,          -- smallest and largest rowid in the block
    hi     bigint NOT NULL,
    rowids bigint[],                 -- NULL once its last posting is deleted (then removed)
    nt     smallint[],
    nb     smallint[],
    dl     integer[]
);
CREATE INDEX bm25_blocks_key ON bm25_blocks (lexeme, corpus, bucket, lo);
CREATE INDEX bm25_blocks_empty ON bm25_blocks (lexeme) WHERE rowids IS NULL;

CREATE TABLE bm25_buckets (
    lexeme text NOT NULL,
    corpus text NOT NULL,
    bucket integer NOT NULL,
    shard  integer NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (lexeme, corpus, bucket, shard)
);

-- The postings of one item row, each with its bucket:
--   (title class * 16 + text class) * 128 + length class, where the title count class is
--   0..3 exact, 4 (4-7), 5 (8+); the text count class 0..7 exact, then 8-11, 12-15, 16-23,
--   24-31, 32-63, 64-127, 128+ (classes 8..14); the length class floor(2 log2 dl).
-- topk.bucket_bounds decodes it. (Computed inline: a SQL function per posting, which the
-- planner would not inline, cost 25 us each.)
CREATE FUNCTION hybridkb_postings(p_rowid bigint, p_corpus text, p_tsv tsvector)
    RETURNS TABLE (lexeme text, corpus text, bucket integer, rowid bigint, nt smallint,
                   nb smallint, dl integer)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT c.lexeme, p_corpus,
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

-- The triggers below share two statements, written once here with ROWS standing for the
-- rows that came (or went): transition tables are only visible in the trigger's own body.
CREATE FUNCTION hybridkb_bm25_sql(action text, source text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE action WHEN 'add' THEN format($f$
    WITH added AS (
        INSERT INTO bm25_blocks (lexeme, corpus, bucket, lo, hi, rowids, nt, nb, dl)
        SELECT p.lexeme, p.corpus, p.bucket, min(p.rowid), max(p.rowid), array_agg(p.rowid),
               array_agg(p.nt), array_agg(p.nb), array_agg(p.dl)
        FROM %s AS d, hybridkb_postings(d.rowid, d.corpus, d.tsv) AS p
        GROUP BY p.lexeme, p.corpus, p.bucket
        RETURNING bm25_blocks.lexeme, bm25_blocks.corpus, bm25_blocks.bucket,
                  cardinality(bm25_blocks.rowids) AS n
    )
    INSERT INTO bm25_buckets AS s (lexeme, corpus, bucket, shard, n)
    SELECT a.lexeme, a.corpus, a.bucket, pg_backend_pid() %% 16, a.n FROM added a
    ORDER BY a.lexeme, a.corpus, a.bucket
    ON CONFLICT (lexeme, corpus, bucket, shard) DO UPDATE SET n = s.n + excluded.n
    $f$, source) ELSE format($f$
    WITH gone AS (
        SELECT p.lexeme, p.corpus, p.bucket, array_agg(p.rowid) AS dead,
               min(p.rowid) AS lo, max(p.rowid) AS hi
        FROM %s AS d, hybridkb_postings(d.rowid, d.corpus, d.tsv) AS p
        GROUP BY p.lexeme, p.corpus, p.bucket
    ), changed AS (
        UPDATE bm25_blocks b SET (rowids, nt, nb, dl) = (
            SELECT array_agg(e.r ORDER BY e.o), array_agg(e.t ORDER BY e.o),
                   array_agg(e.x ORDER BY e.o), array_agg(e.d ORDER BY e.o)
            FROM unnest(b.rowids, b.nt, b.nb, b.dl) WITH ORDINALITY AS e (r, t, x, d, o)
            WHERE e.r <> ALL (g.dead))
        FROM gone g
        WHERE b.lexeme = g.lexeme AND b.corpus = g.corpus AND b.bucket = g.bucket
          AND b.lo <= g.hi AND b.hi >= g.lo AND b.rowids && g.dead
    )
    INSERT INTO bm25_buckets AS s (lexeme, corpus, bucket, shard, n)
    SELECT g.lexeme, g.corpus, g.bucket, pg_backend_pid() %% 16, -cardinality(g.dead)
    FROM gone g ORDER BY g.lexeme, g.corpus, g.bucket
    ON CONFLICT (lexeme, corpus, bucket, shard) DO UPDATE SET n = s.n + excluded.n
    $f$, source) END
    $$;

CREATE FUNCTION hybridkb_bm25_insert() RETURNS trigger LANGUAGE plpgsql SET work_mem = '64MB' AS $$
BEGIN
    EXECUTE hybridkb_bm25_sql('add', 'new_rows');
    RETURN NULL;
END
$$;

CREATE FUNCTION hybridkb_bm25_delete() RETURNS trigger LANGUAGE plpgsql SET work_mem = '64MB' AS $$
BEGIN
    EXECUTE hybridkb_bm25_sql('remove', 'old_rows');
    DELETE FROM bm25_blocks b WHERE b.rowids IS NULL;
    RETURN NULL;
END
$$;

-- Every UPDATE comes here (touch() too); only rows whose text or corpus changed move.
CREATE FUNCTION hybridkb_bm25_update() RETURNS trigger LANGUAGE plpgsql SET work_mem = '64MB' AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM old_rows o JOIN new_rows n USING (rowid)
               WHERE o.corpus <> n.corpus OR o.tsv <> n.tsv) THEN
        EXECUTE hybridkb_bm25_sql('remove', '(SELECT o.* FROM old_rows o JOIN new_rows n '
            'USING (rowid) WHERE o.corpus <> n.corpus OR o.tsv <> n.tsv)');
        DELETE FROM bm25_blocks b WHERE b.rowids IS NULL;
        EXECUTE hybridkb_bm25_sql('add', '(SELECT n.* FROM old_rows o JOIN new_rows n '
            'USING (rowid) WHERE o.corpus <> n.corpus OR o.tsv <> n.tsv)');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER items_bm25_insert AFTER INSERT ON items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION hybridkb_bm25_insert();
CREATE TRIGGER items_bm25_delete AFTER DELETE ON items
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION hybridkb_bm25_delete();
CREATE TRIGGER items_bm25_update AFTER UPDATE ON items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hybridkb_bm25_update();

-- Merge the blocks of each (lexeme, corpus, bucket) into blocks of up to 8,192 postings.
-- Every write statement adds its own small blocks; a query reads each block of a bucket,
-- so the backend merges them when the store has doubled since the last merge (and on
-- demand). Readers are not blocked; concurrent writers wait on the rows it rewrites.
CREATE FUNCTION hybridkb_bm25_compact() RETURNS bigint LANGUAGE plpgsql
    SET work_mem = '256MB' AS $$
DECLARE
    merged bigint;
BEGIN
    WITH keys AS (
        SELECT b.lexeme, b.corpus, b.bucket FROM bm25_blocks b
        GROUP BY b.lexeme, b.corpus, b.bucket HAVING count(*) > 1
    ), gone AS (
        DELETE FROM bm25_blocks b USING keys k
        WHERE b.lexeme = k.lexeme AND b.corpus = k.corpus AND b.bucket = k.bucket
        RETURNING b.lexeme, b.corpus, b.bucket, b.rowids, b.nt, b.nb, b.dl
    ), postings AS (
        SELECT g.lexeme, g.corpus, g.bucket, e.r, e.t, e.x, e.d,
               (row_number() OVER (PARTITION BY g.lexeme, g.corpus, g.bucket ORDER BY e.r) - 1)
                   / 8192 AS part
        FROM gone g, unnest(g.rowids, g.nt, g.nb, g.dl) AS e (r, t, x, d)
    )
    INSERT INTO bm25_blocks (lexeme, corpus, bucket, lo, hi, rowids, nt, nb, dl)
    SELECT p.lexeme, p.corpus, p.bucket, min(p.r), max(p.r), array_agg(p.r ORDER BY p.r),
           array_agg(p.t ORDER BY p.r), array_agg(p.x ORDER BY p.r), array_agg(p.d ORDER BY p.r)
    FROM postings p GROUP BY p.lexeme, p.corpus, p.bucket, p.part;
    GET DIAGNOSTICS merged = ROW_COUNT;
    RETURN merged;
END
$$;

-- Stores created before this migration: index what they hold.
DO $$ BEGIN EXECUTE hybridkb_bm25_sql('add', 'items'); END $$;

-- Stale items, found at once (top-k full-text search leaves them out before ranking).
CREATE INDEX items_stale ON items (rowid) WHERE stale;
