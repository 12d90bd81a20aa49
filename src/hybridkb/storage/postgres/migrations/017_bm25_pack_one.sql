-- A block of one posting packed without a query (issue #16: writes one item at a time).
--
-- An item written alone, as an agent writes a memory, adds one block per lexeme, each of
-- one posting, and hybridkb_pack_postings ran two queries for each (min/max, then four
-- sorted string_aggs over unnest): about 30 us a block, some 3 ms of the 8.5 ms of server
-- time a SciFact abstract's write took. One posting needs no query: its offset from the
-- base (itself) is 0. The row trigger of migration 016 writes those bytes itself; they
-- are the general path's (tests/test_pg_postings.py compares the trigger's blocks with
-- the client's, byte for byte).
CREATE OR REPLACE FUNCTION hybridkb_bm25_pack() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.packed IS NOT NULL THEN
        RETURN NEW;
    ELSIF cardinality(NEW.rowids) = 1 THEN
        NEW.packed := '\x04'::bytea || int8send(NEW.rowids[1]) || '\x00000000'::bytea
                      || int2send(NEW.nt[1]) || int2send(NEW.nb[1]) || int4send(NEW.dl[1]);
    ELSE
        NEW.packed := hybridkb_pack_postings(NEW.rowids, NEW.nt, NEW.nb, NEW.dl);
    END IF;
    RETURN NEW;
END
$$;
