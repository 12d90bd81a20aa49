-- The BM25 index's postings sent in 12 bytes each instead of 32 (issue #16, full text at
-- 1,000,000 items).
--
-- `packed` (migration 006) held the four arrays' array_send output: every element with its
-- own 4-byte length word, rowids in 8 bytes, 32 bytes a posting, compressed with pglz on
-- disk. A query at 1,000,000 items reads 340,000 postings at the median (11 MB): the
-- server spent most of the read decompressing and sending them, and the client 10 ms
-- parsing. Now each column is stored bare, end to end: a width byte (4 or 8) and a base
-- rowid (8 bytes), the rowids less the base (4 bytes when a block's rowids span less than
-- 2^31, else 8 with base 0), then nt and nb (2 bytes each) and dl (4), all big-endian,
-- and kept uncompressed (STORAGE EXTERNAL: pglz saved space but cost more time to undo
-- than the bytes it saved to send). Measured on the same 80 queries' blocks at 1,000,000
-- items (docs/benchmarks.md): the read 23.7 -> 10.3 ms, parsing 10.0 -> 6.3 ms (p50).
-- The price: about 1 us more per posting written (1.1-1.3 us against 0.23-0.26 for
-- array_send, 20,000 blocks packed in SQL; an item holds ~100 postings) and the column
-- about twice its compressed size on disk (12 bytes a posting).
--
-- A generated column again, so every writer keeps it; ORDER BY the ordinality makes the
-- columns' order the arrays' by definition. Rewrites bm25_blocks once (about 1 us per
-- posting: a minute or two for a million-item store), then VACUUM marks its pages
-- all-visible again for the index-only scans of the bucket counts (driver.migrate).
-- vacuum after: bm25_blocks
CREATE FUNCTION hybridkb_pack_postings(rowids bigint[], nt smallint[], nb smallint[],
                                       dl integer[])
    RETURNS bytea LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    lo bigint;
    hi bigint;
BEGIN
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

ALTER TABLE bm25_blocks DROP COLUMN packed;
ALTER TABLE bm25_blocks
    ADD COLUMN packed bytea GENERATED ALWAYS AS (hybridkb_pack_postings(rowids, nt, nb, dl)) STORED,
    ALTER COLUMN packed SET STORAGE EXTERNAL;
DROP FUNCTION hybridkb_pack(bigint[], smallint[], smallint[], integer[]);
