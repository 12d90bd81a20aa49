-- Item vectors are kept as the values of one signed byte per component times a float32
-- scale per row (storage/codec.py: `stored`, as SQLite's migration 013 stores them), so both
-- dialects score the same numbers. The vectors written before (float16 values) are
-- rounded here as codec.quantize does, step by step in the same precision (each step
-- exactly rounded, as numpy's; round() of a double is rint: ties to even; the length is an
-- integer sum in double precision).
-- vacuum after: item_vectors
CREATE FUNCTION hybridkb_stored_values(v vector) RETURNS vector LANGUAGE sql IMMUTABLE AS $f$
    WITH x AS (SELECT e, i FROM unnest(v::real[]) WITH ORDINALITY AS u(e, i)),
         t AS (SELECT CASE WHEN max(abs(e)) = 0 THEN 1::real ELSE max(abs(e)) / 127::real END AS t
               FROM x),
         q AS (SELECT greatest(-127, least(127, round((x.e / t.t)::float8))) AS q, x.i FROM x, t),
         s AS (SELECT CASE WHEN sum(q * q) = 0 THEN 1::real
                           ELSE (1.0::float8 / sqrt(sum(q * q)))::real END AS s FROM q)
    SELECT (array_agg(q.q::real * s.s ORDER BY q.i))::vector FROM q, s
$f$;
DO $d$
BEGIN
    IF to_regclass('item_vectors') IS NOT NULL THEN
        UPDATE item_vectors SET embedding = hybridkb_stored_values(embedding);
    END IF;
    IF to_regclass('item_vectors_pending') IS NOT NULL THEN
        UPDATE item_vectors_pending SET embedding = hybridkb_stored_values(embedding);
    END IF;
END
$d$;
DROP FUNCTION hybridkb_stored_values(vector);
