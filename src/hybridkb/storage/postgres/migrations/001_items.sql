-- Items with a generated, weighted tsvector (title 'A', text 'B') and its GIN index, store
-- metadata, and the per-corpus statistics BM25 needs (document count and total length), kept
-- exact by statement-level triggers. Vectors live in item_vectors, created by the backend once
-- the embedding dimension is known (ensure_vector_storage).
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- ASCII punctuation becomes a space before parsing, so documents are split into words the way
-- textquery splits a query (and SQLite's unicode61 splits both): `node.js`, `src/flags.py` and
-- `migration_032` index as word runs that the query's phrases match.
CREATE FUNCTION hybridkb_words(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT regexp_replace(value, '[!-/:-@\[-`{-~]+', ' ', 'g') $$;

-- How often the lexeme `term` occurs in `doc`, counting positions whose weight is non-zero in
-- `weights` ({D,C,B,A}, so {0,0,0,1} counts the title only). ts_rank of a one-lexeme query,
-- normalization 0, is sum(w_j / j^2, j = 1..tf) / (pi^2 / 6) over the lexeme's positions; with
-- 0/1 weights and the counted positions first, it inverts to tf as below (exact up to 256,
-- the positions a tsvector keeps per lexeme; bounded, never an error, for other queries).
-- One binary search per call, no unnest(); a single expression, so the planner inlines it.
CREATE FUNCTION hybridkb_tf(doc tsvector, term tsquery, weights real[]) RETURNS double precision
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT least(256, round(1.0 / (1.6449340668482264
                 * greatest(1.0 - ts_rank(weights, doc, term, 0)::float8, 1e-9)) - 0.5)) $$;

CREATE TABLE items (
    rowid            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id               text NOT NULL UNIQUE,
    corpus           text NOT NULL,
    title            text,
    text             text NOT NULL,
    kind             text,
    scope            text,
    repo             text,
    namespace        text,
    source_url       text,
    metadata         jsonb NOT NULL DEFAULT '{}',
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    expires_at       double precision,
    access_count     bigint NOT NULL DEFAULT 0,
    last_accessed_at double precision,
    stale            boolean NOT NULL DEFAULT false,
    content_hash     text NOT NULL,
    embedded_hash    text,
    tsv              tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, hybridkb_words(coalesce(title, ''))), 'A')
        || setweight(to_tsvector('english'::regconfig, hybridkb_words(text)), 'B')
    ) STORED
);
-- Keep the tsvector in the row (compressed) and let `text` move to TOAST instead: every
-- full-text query reads the tsvectors of all matching rows, twice as fast from the heap.
ALTER TABLE items ALTER COLUMN tsv SET STORAGE MAIN;
CREATE INDEX items_corpus ON items (corpus);
CREATE INDEX items_expires ON items (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX items_tsv ON items USING gin (tsv);
CREATE INDEX items_unembedded ON items (rowid)
    WHERE embedded_hash IS NULL OR embedded_hash <> content_hash;

-- BM25's N and average document length per corpus. Rows are sharded by server process so
-- concurrent writers to one corpus rarely wait on the same row; readers sum the shards.
CREATE TABLE corpus_stats (
    corpus    text NOT NULL,
    shard     integer NOT NULL,
    n_docs    bigint NOT NULL,
    total_len bigint NOT NULL,
    PRIMARY KEY (corpus, shard)
);

CREATE FUNCTION hybridkb_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO corpus_stats AS s (corpus, shard, n_docs, total_len)
    SELECT n.corpus, pg_backend_pid() % 16, count(*), sum(length(n.tsv))
    FROM new_rows n GROUP BY n.corpus ORDER BY n.corpus
    ON CONFLICT (corpus, shard) DO UPDATE
        SET n_docs = s.n_docs + excluded.n_docs, total_len = s.total_len + excluded.total_len;
    RETURN NULL;
END
$$;

CREATE FUNCTION hybridkb_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO corpus_stats AS s (corpus, shard, n_docs, total_len)
    SELECT o.corpus, pg_backend_pid() % 16, -count(*), -sum(length(o.tsv))
    FROM old_rows o GROUP BY o.corpus ORDER BY o.corpus
    ON CONFLICT (corpus, shard) DO UPDATE
        SET n_docs = s.n_docs + excluded.n_docs, total_len = s.total_len + excluded.total_len;
    RETURN NULL;
END
$$;

-- Statement-level triggers cannot name columns, so every UPDATE (touch() too) comes here;
-- rows whose corpus and length did not change cancel out and nothing is written.
CREATE FUNCTION hybridkb_stats_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO corpus_stats AS s (corpus, shard, n_docs, total_len)
    SELECT d.corpus, pg_backend_pid() % 16, sum(d.n), sum(d.len)
    FROM (
        SELECT n.corpus, 1 AS n, length(n.tsv) AS len FROM new_rows n
        UNION ALL
        SELECT o.corpus, -1, -length(o.tsv) FROM old_rows o
    ) AS d
    GROUP BY d.corpus
    HAVING sum(d.n) <> 0 OR sum(d.len) <> 0
    ORDER BY d.corpus
    ON CONFLICT (corpus, shard) DO UPDATE
        SET n_docs = s.n_docs + excluded.n_docs, total_len = s.total_len + excluded.total_len;
    RETURN NULL;
END
$$;

CREATE TRIGGER items_stats_insert AFTER INSERT ON items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION hybridkb_stats_insert();
CREATE TRIGGER items_stats_delete AFTER DELETE ON items
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION hybridkb_stats_delete();
CREATE TRIGGER items_stats_update AFTER UPDATE ON items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hybridkb_stats_update();
