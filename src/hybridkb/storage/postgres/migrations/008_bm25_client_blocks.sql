-- A COPY batch may bring its BM25 postings itself (issue #16, bulk ingest).
--
-- The insert trigger's statement (migration 004) spent most of a bulk load's server time
-- grouping postings into blocks with array_agg. For a COPY batch the client now reads the
-- new rows' tsvectors back, builds the very rows this statement would have written
-- (storage/postgres/postings.py) and COPYs them into bm25_blocks in the same transaction.
-- While it does, the transaction-local setting `hybridkb.bm25_by_client` is 'on' and the
-- trigger writes nothing; the writer switches it off again right after its COPY, and it
-- ends with the transaction in any case (a crash or an error rolls back the items and
-- their blocks together).
CREATE OR REPLACE FUNCTION hybridkb_bm25_insert() RETURNS trigger LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
BEGIN
    IF current_setting('hybridkb.bm25_by_client', true) = 'on' THEN
        RETURN NULL;
    END IF;
    EXECUTE hybridkb_bm25_sql('add', 'new_rows');
    RETURN NULL;
END
$$;
