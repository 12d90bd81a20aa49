-- A COPY batch's BM25 blocks may bring their `packed` bytes (issue #16, bulk ingest).
--
-- Since migration 015 `packed` is the postings' columns bare and big-endian, computed by
-- hybridkb_pack_postings in SQL: one int4send/int2send and string_agg step per posting
-- and column, about 30 us a block row. That was half of the insert trigger's server time
-- in a bulk load (20,000 benchmark items: 6.6 of 12.8 s), and it was paid for the blocks
-- the client builds too (postings.py), since a generated column cannot be written. Now
-- `packed` is a plain column, filled by a row trigger from the arrays whenever a writer
-- leaves it NULL (the insert trigger, merges) and on every update (a delete rewrites a
-- block's arrays); the client's COPY batches write it themselves, computed with numpy
-- (postings.pack), byte for byte the function's output (tests/test_pg_postings.py).
-- DROP EXPRESSION keeps every stored value and rewrites nothing.
ALTER TABLE bm25_blocks ALTER COLUMN packed DROP EXPRESSION;

CREATE OR REPLACE FUNCTION hybridkb_bm25_pack() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR NEW.packed IS NULL THEN
        NEW.packed := hybridkb_pack_postings(NEW.rowids, NEW.nt, NEW.nb, NEW.dl);
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS bm25_blocks_pack ON bm25_blocks;
CREATE TRIGGER bm25_blocks_pack BEFORE INSERT OR UPDATE ON bm25_blocks
    FOR EACH ROW EXECUTE FUNCTION hybridkb_bm25_pack();
