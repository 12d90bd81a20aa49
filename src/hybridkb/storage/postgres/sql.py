"""SQL of the PostgreSQL backend: statements, filters, BM25 and KNN queries.

Composed with psycopg.sql: identifiers and numbers chosen by code go through
`sql.Identifier` / `sql.Literal`; every value from a caller is a bound parameter (`%s`).

Full-text ranking is Okapi BM25 as SQLite's tantivy index computes it (k1 = 1.2, b = 0.75,
Lucene's idf ln(1 + (N - df + 0.5) / (df + 0.5)), one term per query phrase), from exact ingredients:
- tf: how often the term's lexeme occurs in the document (`hybridkb_tf`, migration 001);
  for a multi-word phrase, the least frequent of its lexemes in a document containing it;
- df: the corpus's documents containing the term -- each of them matches the OR query, so
  they are counted among the matching rows of the same query;
- N and the average length: `corpus_stats`, kept exact by triggers. A document's length is
  its number of distinct lexemes (`length(tsvector)`), which a tsvector knows for free.
Statistics are those of the corpora searched (SQLite's span the whole file); expired and
stale items count in them as in FTS5, while the filters decide which items come back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from psycopg import sql

from ...pathglob import common_prefixes, paths_regex
from ...querysyntax import TextMatch, Words
from .. import records
from ..contract import SearchArea, Vector

RANKINGS = ("bm25", "ts_rank", "ts_rank_cd")
BM25_K1 = 1.2
BM25_B = 0.75
# The SQL type of each of records.WRITE_COLUMNS (the arrays of INSERT below; bulk.py's COPY).
WRITE_TYPES = (
    "text", "text", "text", "text", "text", "text", "text", "text", "text", "jsonb", "float8",
    "float8", "float8", "bigint", "float8", "boolean", "text", "text", "bigint",
)
_WRITE_COLUMNS = sql.SQL(", ").join(sql.Identifier(c) for c in records.WRITE_COLUMNS)
_READ_COLUMNS = sql.SQL(", ").join(sql.Identifier(c) for c in records.READ_COLUMNS)

SELECT_ITEMS = sql.SQL("SELECT {} FROM items WHERE id = ANY(%s)").format(_READ_COLUMNS)
SELECT_LIVE_ITEMS = sql.SQL(
    "SELECT {} FROM items WHERE id = ANY(%s) AND (expires_at IS NULL OR expires_at > %s)"
).format(_READ_COLUMNS)
SELECT_ITEMS_BY_ROWID = sql.SQL(
    "SELECT rowid, {} FROM items WHERE rowid = ANY(%s)").format(_READ_COLUMNS)
SELECT_ITEMS_AFTER = sql.SQL(
    "SELECT rowid, {} FROM items WHERE rowid > %s ORDER BY rowid LIMIT %s").format(_READ_COLUMNS)

# One statement per batch: columns arrive as arrays and are unnested into rows, so the
# statistics triggers run once per batch rather than once per item.
_INSERT = (
    "INSERT INTO items ({columns}) SELECT * FROM unnest({arrays}) "
    "{conflict} RETURNING rowid, id, embedded_hash"
)
_ARRAYS = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in WRITE_TYPES)
INSERT = sql.SQL(_INSERT).format(columns=_WRITE_COLUMNS, arrays=_ARRAYS, conflict=sql.SQL(""))
UPSERT = sql.SQL(_INSERT).format(columns=_WRITE_COLUMNS, arrays=_ARRAYS,
                                 conflict=sql.SQL(records.ON_CONFLICT_REPLACE))
# A server limited to some corpora replaces only rows already in them (the last parameter).
UPSERT_WITHIN = sql.SQL(_INSERT).format(
    columns=_WRITE_COLUMNS, arrays=_ARRAYS,
    conflict=sql.SQL(records.ON_CONFLICT_REPLACE + " WHERE items.corpus = ANY(%s::text[])"))

UPSERT_VECTORS = sql.SQL(
    "INSERT INTO item_vectors (rowid, embedding) SELECT * FROM unnest(%s::bigint[], %s::vector[]) "
    "ON CONFLICT (rowid) DO UPDATE SET embedding = excluded.embedding")
SET_META = sql.SQL(records.set_meta_sql("%s"))
# write_vectors: only items whose text still has the hash the vector was computed from.
MARK_EMBEDDED = sql.SQL(
    "UPDATE items SET embedded_hash = u.h FROM unnest(%s::text[], %s::text[]) AS u (id, h) "
    "WHERE items.id = u.id AND items.content_hash = u.h RETURNING items.rowid, items.id")
UPSERT_PENDING = sql.SQL(
    "INSERT INTO item_vectors_pending (id, embedding, content_hash) "
    "SELECT * FROM unnest(%s::text[], %s::vector[], %s::text[]) "
    "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, "
    "content_hash = excluded.content_hash")
MOVE_PENDING = sql.SQL(
    "INSERT INTO item_vectors (rowid, embedding) SELECT i.rowid, p.embedding "
    "FROM item_vectors_pending p JOIN items i ON i.id = p.id AND i.content_hash = p.content_hash")
UNMARK_NOT_PENDING = sql.SQL(
    "UPDATE items SET embedded_hash = NULL WHERE embedded_hash IS NOT NULL AND NOT EXISTS "
    "(SELECT 1 FROM item_vectors v WHERE v.rowid = items.rowid)")
MARK_PENDING = sql.SQL(
    "UPDATE items SET embedded_hash = content_hash FROM item_vectors v "
    "WHERE v.rowid = items.rowid AND items.embedded_hash IS DISTINCT FROM items.content_hash")
# Items in the store: corpus_stats' counts, kept exact by triggers (no count of items).
STORE_ITEMS = sql.SQL("SELECT coalesce(sum(n_docs), 0) FROM corpus_stats")

# Items in the store and how many it held when the BM25 index's blocks were last merged;
# rows written in all (the items' identity sequence: every insert and upsert draws from it)
# and how many at that merge.
COMPACT_STATE = sql.SQL(
    "SELECT (SELECT coalesce(sum(n_docs), 0) FROM corpus_stats), "
    "coalesce((SELECT value::bigint FROM meta WHERE key = %s), 0), "
    "coalesce(pg_sequence_last_value(pg_get_serial_sequence('items', 'rowid')::regclass), 0), "
    "coalesce((SELECT value::bigint FROM meta WHERE key = %s), 0)")

# Per corpus: items and their total length, against what corpus_stats says.
STATS_CHECK = sql.SQL(
    "SELECT corpus, coalesce(a.n, 0), coalesce(b.n, 0), coalesce(a.len, 0), coalesce(b.len, 0) "
    "FROM (SELECT corpus, count(*) AS n, sum(length(tsv)) AS len FROM items GROUP BY corpus) a "
    "FULL JOIN (SELECT corpus, sum(n_docs) AS n, sum(total_len) AS len FROM corpus_stats "
    "GROUP BY corpus) b USING (corpus) ORDER BY corpus")
# The BM25 index holds one posting per (lexeme, item); its blocks' counts agree with it.
BM25_CHECK = sql.SQL(
    "SELECT (SELECT coalesce(sum(length(tsv)), 0) FROM items), "
    "coalesce(sum(cardinality(rowids)), 0), coalesce(sum(n), 0) FROM bm25_blocks")
# Blocks whose `packed` bytes (migrations 015-016; the client writes them for COPY batches)
# cannot hold their `n` postings: missing, or not a width byte (4 or 8) and 9 + n x
# (width + 8) bytes. Reads the width by a slice and the length from the TOAST pointer, so
# no block is fetched whole.
PACKED_CHECK = sql.SQL(
    "SELECT count(*) FROM bm25_blocks WHERE rowids IS NOT NULL AND (packed IS NULL OR "
    "substring(packed FROM 1 FOR 1) NOT IN ('\\x04'::bytea, '\\x08'::bytea) OR octet_length(packed) "
    "<> 9 + n * (get_byte(substring(packed FROM 1 FOR 1), 0) + 8))")
VECTOR_CHECKS = tuple((label, sql.SQL(check)) for label, check in records.vector_checks("item_vectors"))


def create_vector_table(dim: int) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE item_vectors (rowid bigint PRIMARY KEY "
        "REFERENCES items (rowid) ON DELETE CASCADE, embedding vector({}) NOT NULL)"
    ).format(sql.Literal(int(dim)))


def create_pending_table(dim: int) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE item_vectors_pending (id text PRIMARY KEY, "
        "embedding vector({}) NOT NULL, content_hash text NOT NULL)").format(sql.Literal(int(dim)))


def explain(statement: sql.Composed) -> sql.Composed:
    return sql.Composed([sql.SQL("EXPLAIN "), statement])


# -- filters ---------------------------------------------------------------------------------


def _json_values(values: Sequence[Any]) -> list[str]:
    """JSON forms a metadata value must equal to match, as SQLite's json_each compares.

    SQLite reads JSON true/false as 1/0, so a filter True also matches 1 (and 1 matches
    true); strings equal strings only, numbers equal numbers (1 == 1.0).
    """
    out: list[str] = []
    for v in values:
        out.append(json.dumps(v))
        if isinstance(v, bool):
            out.append(json.dumps(int(v)))
        elif isinstance(v, int | float) and v in (0, 1):
            out.append(json.dumps(bool(v)))
    return out


def _one_of(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    return f"{column} = ANY(%s::text[])", [list(values)]


# A metadata filter naming more values than this is written as one equality test instead
# of containment (each value is one more scan of the index; past a few dozen the rows are
# many anyway).
CONTAINMENT_MAX_VALUES = 32


def metadata_containment(alias: str, key: str, values: Sequence[Any]) -> tuple[str, list[Any]] | None:
    """The rows whose metadata holds `key` with one of `values`, as containment: what the
    GIN index on metadata (migration 011) finds and the planner estimates from the
    column's statistics. For the scalars a filter takes, containment is equality
    (`{"k": ["a"]}` does not contain `{"k": "a"}`; 2.0 contains 2); None past
    CONTAINMENT_MAX_VALUES forms."""
    forms = _json_values(values)
    if not forms or len(forms) > CONTAINMENT_MAX_VALUES:
        return None
    docs = [json.dumps({key: json.loads(form)}) for form in forms]
    return "(" + " OR ".join([f"{alias}.metadata @> %s::jsonb"] * len(docs)) + ")", docs


def _metadata_equal(alias: str, key: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    return f"{alias}.metadata -> %s::text = ANY(%s::jsonb[])", [key, _json_values(values)]


def _metadata_in(alias: str, key: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    return metadata_containment(alias, key, values) or _metadata_equal(alias, key, values)


def _path_regex(alias: str, patterns: Sequence[str]) -> tuple[str, list[Any]]:
    return f"({alias}.metadata ->> 'path') ~ %s", [paths_regex(patterns)]


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def path_prefixes(alias: str, patterns: Sequence[str]) -> tuple[str, list[Any]] | None:
    """The paths `patterns` can match, by the text before their first wildcard: what
    the B-tree index on metadata.path (migration 013) finds and the planner estimates from
    that index's statistics. A superset (the regex decides); None when some pattern can
    match a name at any depth."""
    prefixes = common_prefixes(patterns)
    if prefixes is None:
        return None
    likes = " OR ".join([f"({alias}.metadata ->> 'path') LIKE %s"] * len(prefixes))
    return f"({likes})", [_like_prefix(p) for p in prefixes]


def _path_matches(alias: str, patterns: Sequence[str]) -> tuple[str, list[Any]]:
    regex, params = _path_regex(alias, patterns)
    prefixed = path_prefixes(alias, patterns)
    if prefixed is None:
        return regex, params
    return f"({prefixed[0]} AND {regex})", [*prefixed[1], *params]


def _is_false(column: str) -> str:
    return f"NOT {column}"


def _words_query(words: Words) -> tuple[str, str]:
    """A word condition as a tsquery expression and its bound value: a phrase (its words
    side by side, `<->`), or a prefix (`'stem':*`: letters and digits only, nothing to
    quote; to_tsquery stems it, as tantivy's analyzer stems SQLite's)."""
    if words.prefix:
        return "to_tsquery('english', %s)", f"'{words.words[0]}':*"
    return "phraseto_tsquery('english', %s)", " ".join(words.words)


def _text_match(alias: str, match: TextMatch) -> tuple[str, list[Any]]:
    """The query's `+word`, `title:` and `-word` conditions on the weighted tsvector (the
    title's positions are weighted 'A', migration 001)."""
    clauses, params = [], []
    for group, form in ((match.required, "{tsv} @@ {q}"),
                        (match.title, "ts_filter({tsv}, ARRAY['a']::\"char\"[]) @@ {q}"),
                        (match.excluded, "NOT ({tsv} @@ {q})")):
        for words in group:
            query, value = _words_query(words)
            clauses.append(form.format(tsv=f"{alias}.tsv", q=query))
            params.append(value)
    return "(" + " AND ".join(clauses) + ")", params


_DIALECT = records.FilterDialect(mark="%s", one_of=_one_of, is_false=_is_false,
                                 metadata_in=_metadata_in, path_matches=_path_matches,
                                 text_match=_text_match)
# For conditions checked row by row (rows an index scan found): containment and path
# prefixes would only add work there (twelve `@>` tests a row for `copy` in 0-9 made a search 1.35x slower).
_ROW_DIALECT = replace(_DIALECT, metadata_in=_metadata_equal, path_matches=_path_regex)


def filter_sql(area: SearchArea, *, corpus: bool = True,
               indexed: bool = True) -> tuple[sql.Composable, list[Any]]:
    """Conditions (joined by AND) on `items i` and their bound values for a SearchArea;
    `indexed=False` for rows already found (metadata as equality, paths as the regex
    alone: no conditions written for an index)."""
    dialect = _DIALECT if indexed else _ROW_DIALECT
    clauses, params = records.filter_conditions(area, dialect, corpus=corpus)
    return sql.SQL(" AND ".join(clauses) or "true"), params


def _in_corpora(column: str, corpora: Sequence[str] | None) -> tuple[sql.Composable, list[Any]]:
    """`column` names one of the corpora searched (None: every corpus)."""
    if corpora is None:
        return sql.SQL("true"), []
    if len(corpora) == 1:
        return sql.SQL(f"{column} = %s"), [corpora[0]]
    clause, params = _one_of(column, corpora)
    return sql.SQL(clause), params


# -- full text -------------------------------------------------------------------------------


def _or_query(n: int) -> sql.Composable:
    """phraseto_tsquery of each term (a bound value), OR-ed: user text never reaches to_tsquery."""
    return sql.SQL(" || ").join([sql.SQL("phraseto_tsquery('english', %s)")] * n)


def _tf(doc: str, term: str, weights: str) -> sql.Composable:
    return sql.SQL("hybridkb_tf({}, {}, {}::real[])").format(
        sql.SQL(doc), sql.SQL(term), sql.Literal(weights))


def _term_frequency(weights: str) -> sql.Composable:
    """tf of term t in document m (which contains it): its lexeme's count, or for a phrase
    the count of its rarest word (at least 1)."""
    return sql.SQL(
        "CASE WHEN numnode(t.q) = 1 THEN {one} "
        "ELSE coalesce((SELECT min({each}) FROM unnest(t.lq) AS x), 1) END"
    ).format(one=_tf("m.tsv", "t.q", weights), each=_tf("m.tsv", "x", weights))


def terms_cte(terms: str) -> str:
    """The CTE `t` of the query's terms (`terms`: a row source of (term, ord)): each term's
    phrase tsquery `q` and the tsquery of each of its words `lq` (a phrase's tf is that of
    its rarest word; see _term_frequency). Shared by the exact statement and the top-k
    path's scoring of its last candidates (fulltext.py), which must score alike."""
    return f"""t AS MATERIALIZED (
    SELECT u.ord, u.q,
           ARRAY(SELECT x FROM unnest(string_to_array(u.term, ' ')) AS w,
                 plainto_tsquery('english', w) AS x WHERE numnode(x) > 0) AS lq
    FROM (SELECT a.ord, a.term, phraseto_tsquery('english', a.term) AS q
          FROM {terms} AS a (term, ord)) AS u
    WHERE numnode(u.q) > 0
)"""


_BM25 = "WITH " + terms_cte("unnest(%s::text[]) WITH ORDINALITY") + """,
m AS MATERIALIZED (
    -- `|| ''` detoasts each tsvector once here rather than once per term below.
    SELECT i.rowid, i.tsv || ''::tsvector AS tsv, length(i.tsv) AS dl, {ok} AS ok
    FROM items i
    WHERE {in_corpora} AND i.tsv @@ ({query})
),
f AS MATERIALIZED (
    SELECT m.rowid, t.ord, c.n, {weighted} AS tf
    FROM m JOIN t ON m.tsv @@ t.q CROSS JOIN LATERAL (SELECT {n} AS n, {n_title} AS nt) AS c
),
d AS (SELECT ord, count(*)::float8 AS df FROM f WHERE n > 0 GROUP BY ord),
s AS (
    SELECT coalesce(sum(n_docs), 0)::float8 AS n,
           greatest(coalesce(sum(total_len)::float8 / nullif(sum(n_docs), 0), 1), 1) AS avgdl
    FROM corpus_stats WHERE {stats_in_corpora}
)
SELECT m.rowid, sum(
    ln(1 + (greatest(s.n, d.df) - d.df + 0.5) / (d.df + 0.5))
    * f.tf * ({k1} + 1) / (f.tf + {k1} * (1 - {b} + {b} * m.dl / s.avgdl))) AS score
FROM f JOIN d USING (ord) JOIN m USING (rowid) CROSS JOIN s
WHERE m.ok AND f.n > 0
GROUP BY m.rowid
ORDER BY score DESC, m.rowid
LIMIT %s
"""

_TS_RANK = """
SELECT i.rowid, {function}(i.tsv, q.q, {normalization}) AS score
FROM items i, (SELECT {query} AS q) AS q
WHERE i.tsv @@ q.q AND {filters}
ORDER BY score DESC, i.rowid
LIMIT %s
"""


def text_search(
    terms: Sequence[str], area: SearchArea, limit: int, *, ranking: str = "bm25",
    weights: tuple[float, float] = (1.0, 1.0), normalization: int = 0,
) -> tuple[sql.Composed, list[Any]]:
    """BM25 (or ts_rank / ts_rank_cd, kept for measurement) over the OR of `terms`."""
    if ranking != "bm25":
        where, params = filter_sql(area)
        statement = sql.SQL(_TS_RANK).format(
            function=sql.Identifier(ranking), normalization=sql.Literal(int(normalization)),
            query=_or_query(len(terms)), filters=where)
        return statement, [*terms, *params, limit]
    ok, ok_params = filter_sql(area, corpus=False)
    in_corpora, corpus_params = _in_corpora("i.corpus", area.corpora)
    stats_in_corpora, stats_params = _in_corpora("corpus", area.corpora)
    title_weight, text_weight = weights
    n = _term_frequency("{1,1,1,1}")
    if (title_weight, text_weight) == (1.0, 1.0):
        n_title: sql.Composable = sql.SQL("0")
        weighted: sql.Composable = sql.SQL("c.n")
    else:  # positions weighted 'A' are the title's (see migration 001)
        n_title = _term_frequency("{0,0,0,1}")
        weighted = sql.SQL("{} * c.nt + {} * (c.n - c.nt)").format(
            sql.Literal(float(title_weight)), sql.Literal(float(text_weight)))
    statement = sql.SQL(_BM25).format(
        ok=sql.SQL("({})").format(ok), in_corpora=in_corpora, stats_in_corpora=stats_in_corpora,
        query=_or_query(len(terms)), n=n, n_title=n_title,
        weighted=weighted, k1=sql.Literal(BM25_K1), b=sql.Literal(BM25_B))
    return statement, [list(terms), *ok_params, *corpus_params, *terms, *stats_params, limit]


# The words of the corpora searched starting with a prefix's stem, the most frequent first
# (ties bytewise, as SQLite's text_match.py ranks them), from the BM25 index's blocks.
PREFIX_WORDS = """
WITH p AS (SELECT min(x) AS stem FROM unnest(tsvector_to_array(to_tsvector('english', %s))) AS x)
SELECT b.lexeme, sum(b.n) AS df FROM bm25_blocks b
WHERE b.lexeme >= (SELECT stem FROM p) AND b.lexeme < (SELECT stem || chr(1114111) FROM p)
  AND starts_with(b.lexeme, (SELECT stem FROM p)) AND {in_corpora}
GROUP BY b.lexeme HAVING sum(b.n) > 0
ORDER BY df DESC, b.lexeme
LIMIT %s
"""


def prefix_words(prefix: str, corpora: Sequence[str] | None,
                 limit: int) -> tuple[sql.Composed, list[Any]]:
    in_corpora, params = _in_corpora("b.corpus", corpora)
    return sql.SQL(PREFIX_WORDS).format(in_corpora=in_corpora), [prefix, *params, limit]


def substring_search(
    words: Sequence[str], area: SearchArea, limit: int,
) -> tuple[sql.Composed, list[Any]]:
    """Items scored by how many (word, field) pairs contain the word, as SQLite's instr()."""
    where, params = filter_sql(area)
    hits = sql.SQL(" + ").join(
        [sql.SQL("(strpos(lower(i.text), %s) > 0)::int "
                 "+ (strpos(lower(coalesce(i.title, '')), %s) > 0)::int")] * len(words))
    statement = sql.SQL(
        "SELECT rowid, s FROM (SELECT i.rowid, i.id, {hits} AS s FROM items i WHERE {where}) "
        "AS x WHERE s > 0 ORDER BY s DESC, id LIMIT %s").format(hits=hits, where=where)
    return statement, [*(w for w in words for _ in (0, 1)), *params, limit]


# -- vectors ---------------------------------------------------------------------------------

# Vectors are unit length (embedders normalize, the store normalizes callers' vectors), so
# the score is the dot product, as the SQLite backend computes it: cosine similarity without
# the float32 noise of re-normalizing, which would break exact ties differently. The IVFFlat
# index over the vectors cast to half precision (cosine, ann.py) picks the candidates in the
# order of its own distance; they are re-sorted by the exact score, ties by rowid as SQLite.
_KNN = """
WITH r AS MATERIALIZED (
    SELECT v.rowid, v.embedding <#> %s AS nd
    FROM item_vectors v JOIN items i ON i.rowid = v.rowid
    WHERE {filters}
    ORDER BY {order}
    LIMIT %s
)
SELECT rowid, -nd FROM r ORDER BY nd, rowid
"""


def knn_order(dim: int, column: str = "embedding") -> sql.Composed:
    """What the IVFFlat index orders by: the cosine distance of the half-precision vectors
    (the planner uses the index only for this very expression, dimension included)."""
    half = sql.SQL("halfvec({})").format(sql.Literal(dim))
    return sql.SQL("{}::{} <=> %s::{}").format(sql.Identifier(*column.split(".")), half, half)


# No index orders by `<#>` (it is cosine), so this is an exact scan of the filtered rows.
_EXACT = """
SELECT v.rowid, -(v.embedding <#> %s)
FROM item_vectors v JOIN items i ON i.rowid = v.rowid
WHERE {filters}
ORDER BY (v.embedding <#> %s) + 0, i.rowid
LIMIT %s
"""


def vector_search(query: Vector, area: SearchArea, limit: int, *,
                  exact: bool) -> tuple[sql.Composed, list[Any]]:
    """KNN by cosine: (rowid, similarity) best first; relaxed-order results are re-sorted."""
    # Containment and path prefixes in the KNN statement too: with the JSON equality the
    # planner guessed a filter keeping 17.6% of 100,000 items at 2%, and sorted every
    # kept row (290 ms) instead of scanning the vector index.
    where, params = filter_sql(area)
    statement = (sql.SQL(_EXACT).format(filters=where) if exact else
                 sql.SQL(_KNN).format(filters=where, order=knn_order(len(query), "v.embedding")))
    return statement, [query, *params, query, limit]
