-- A block of one posting packed without a query (issue #16: writes one item at a time).
--
-- An item written alone, as an agent writes a memory, adds one block per lexeme, each of
-- one posting, and packing each took two queries inside hybridkb_pack_postings (min/max,
-- then four sorted string_aggs over unnest): about 30 us a block, some 3 ms of the 8.5 ms
-- of server time a SciFact abstract's write took. One posting needs no query: its offset
-- from the base (itself) is 0. The bytes are those of the general path (tested against
-- postings.pack and blockcache.Block.parse).
CREATE OR REPLACE FUNCTION hybridkb_pack_postings(rowids bigint[], nt smallint[], nb smallint[],
                                                  dl integer[])
    RETURNS bytea LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    lo bigint;
    hi bigint;
BEGIN
    IF cardinality(rowids) = 1 THEN
        RETURN '\x04'::bytea || int8send(rowids[1]) || '\x00000000'::bytea || int2send(nt[1])
               || int2send(nb[1]) || int4send(dl[1]);
    END IF;
    SELECT min(x), max(x) INTO lo, hi FROM unnest(rowids) AS x;
    IF hi - lo < 2147483647 THEN
        RETURN (SELECT '\x04'::bytea || int8send(lo)
                       || string_agg(int4send((u.r - lo)::integer), '' ORDER BY u.o)
                       || string_agg(int2send(u.t), '' ORDER BY u.o)
                       || string_agg(int2send(u.b), '' ORDER BY u.o)
                       || string_agg(int4send(u.d), '' ORDER BY u.o)
                FROM unnest(rowids, nt, nb, dl) WITH ORDINALITY AS u (r, t, b, d, o));
    END IF;
    RETURN (SELECT '\x08'::bytea || int8send(0::bigint)
                   || string_agg(int8send(u.r), '' ORDER BY u.o)
                   || string_agg(int2send(u.t), '' ORDER BY u.o)
                   || string_agg(int2send(u.b), '' ORDER BY u.o)
                   || string_agg(int4send(u.d), '' ORDER BY u.o)
            FROM unnest(rowids, nt, nb, dl) WITH ORDINALITY AS u (r, t, b, d, o));
END
$$;
