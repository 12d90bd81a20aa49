-- Chinese, Japanese and Korean words inside unspaced text: each CJK run is indexed as its
-- overlapping bigrams ("東京都" -> "東京 京都"), the rule of textquery.cjk_expand, which applies it
-- to queries alike; other text passes unchanged. hybridkb_words (used by the generated tsvector)
-- now calls it; rows holding CJK text are rewritten so their tsvector is computed again (the
-- statement triggers keep the BM25 statistics exact).
CREATE FUNCTION hybridkb_cjk(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT CASE WHEN value !~ '[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]' THEN value ELSE (
        SELECT string_agg(
            CASE WHEN r.m[1] !~ '^[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]' THEN r.m[1]
                 WHEN length(r.m[1]) < 3 THEN ' ' || r.m[1] || ' '
                 ELSE ' ' || (SELECT string_agg(substr(r.m[1], i, 2), ' ' ORDER BY i)
                              FROM generate_series(1, length(r.m[1]) - 1) AS i) || ' ' END,
            '' ORDER BY r.o)
        FROM regexp_matches(value, '([\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+|[^\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+)', 'g') WITH ORDINALITY AS r (m, o)
    ) END $$;

CREATE OR REPLACE FUNCTION hybridkb_words(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT regexp_replace(hybridkb_cjk(value), '[!-/:-@\[-`{-~]+', ' ', 'g') $$;

UPDATE items SET text = text
WHERE text ~ '[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]' OR coalesce(title, '') ~ '[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]';
