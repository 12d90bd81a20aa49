"""What the tantivy text index stores per item and how a search becomes a tantivy query.

One BM25 field holds "title title text": measured (issue #15), that matches FTS5 with a
title weight of 2 on SciFact and NFCorpus, while two tantivy fields with a title boost
lose 0.074 nDCG@10. The filter fields sit beside it as raw terms and fast numeric
columns, so every filter runs inside the index as a zero-score MUST clause and BM25
scores are exactly the unfiltered ones. Building documents and queries needs only the
schema: no I/O here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tantivy

from ...model import Filters
from ...querysyntax import TextMatch, Words
from ...textquery import STOPWORDS, TextQuery, cjk_expand

# Bump when the schema, the analyzer or what a field holds changes: an index written
# under another format is rebuilt from the items. 3: the `title` field (`title:` queries).
SCHEMA_VERSION = 3
ANALYZER = "hkb_en"
_RAW = "raw"
# Absent expiry, stored as a number the clock never reaches (fast fields have no NULL).
NEVER = 1e300
_META_SEP = "\x1f"
# Tokens longer than this are dropped (FTS5 keeps them, but they never match a query word
# that the textquery would produce sensibly; tantivy refuses terms over 65,530 bytes).
MAX_TOKEN_CHARS = 255

FILTER_TEXT_FIELDS = ("corpus", "kind", "scope", "repo", "namespace")


@dataclass(frozen=True, slots=True)
class TextDoc:
    """The part of an item the text index holds, keyed by the item's SQLite rowid."""

    rowid: int
    title: str | None
    text: str
    corpus: str
    kind: str | None = None
    scope: str | None = None
    repo: str | None = None
    namespace: str | None = None
    metadata: Mapping[str, Any] | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    stale: bool = False


def analyzer() -> tantivy.TextAnalyzer:
    """FTS5's `porter unicode61 remove_diacritics 2`, as near as tantivy has it.

    The simple tokenizer splits on what is not a letter or digit (as unicode61 does),
    then lowercase, fold diacritics, English stemming (Snowball's Porter2, FTS5 uses
    the original Porter; docs/quality.md's full-text rows are measured with this one).
    """
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def build_schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    # i64, not u64: tantivy-py turns a Python int into an i64 term (delete_documents_by_term)
    b.add_integer_field("rowid", indexed=True, fast=True)
    b.add_text_field("body", tokenizer_name=ANALYZER, index_option="position")
    # The title alone, for `title:` conditions only (it never scores: "body" holds it too).
    b.add_text_field("title", tokenizer_name=ANALYZER, index_option="position")
    for name in FILTER_TEXT_FIELDS:
        b.add_text_field(name, tokenizer_name=_RAW, index_option="basic")
    b.add_text_field("meta", tokenizer_name=_RAW, index_option="basic")
    b.add_float_field("expires", indexed=True, fast=True)
    b.add_float_field("created", indexed=True, fast=True)
    b.add_float_field("updated", indexed=True, fast=True)
    b.add_boolean_field("stale", indexed=True, fast=True)
    return b.build()


TITLE_REPEAT = 2  # the default BM25 title weight 2 (records.DEFAULT_BM25_WEIGHTS)


def title_repeat(weights: tuple[float, float]) -> int:
    """How often the title is written for (title, text) BM25 weights: their ratio, rounded."""
    title, text = weights
    if not (text > 0 and title >= 0):
        return TITLE_REPEAT
    return max(0, min(8, round(title / text)))


def body_of(title: str | None, text: str, repeat: int = TITLE_REPEAT) -> str:
    """The one BM25 field: the title `repeat` times, then the text; CJK runs as their
    overlapping bigrams (textquery.cjk_expand, the rule queries are parsed with)."""
    body = "\n".join([title] * repeat + [text]) if title and repeat else text
    return cjk_expand(body)


def _meta_number(value: int | float) -> str | None:
    """Numbers compare by value in SQLite's json_each (1 = 1.0 = true): one spelling each."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer() and abs(value) < 2**63:
            return str(int(value))
        return repr(value)
    return str(int(value))


def meta_token(key: str, value: object) -> str | None:
    """The term a metadata key/value pair is indexed (and filtered) as; None if unindexable."""
    if isinstance(value, str):
        return f"{key}{_META_SEP}s{value}"
    if isinstance(value, bool | int | float):
        number = _meta_number(value)
        return None if number is None else f"{key}{_META_SEP}n{number}"
    return None  # null, lists and objects: json_each never equals a scalar filter value to them


def to_document(doc: TextDoc, repeat: int = TITLE_REPEAT) -> tantivy.Document:
    """The index's document for an item (fields as build_schema declares them). Built field
    by field: `Document.from_dict` with the schema cost four times as much (150 vs 36 us a
    document, half a rebuild's Python time)."""
    out = tantivy.Document()
    out.add_integer("rowid", doc.rowid)
    out.add_text("body", body_of(doc.title, doc.text, repeat))
    if doc.title:
        out.add_text("title", cjk_expand(doc.title))
    out.add_float("expires", NEVER if doc.expires_at is None else float(doc.expires_at))
    out.add_float("created", float(doc.created_at))
    out.add_float("updated", float(doc.updated_at))
    out.add_boolean("stale", bool(doc.stale))
    for name in FILTER_TEXT_FIELDS:
        value = getattr(doc, name)
        if value is not None:
            out.add_text(name, value)
    for k, v in (doc.metadata or {}).items():
        token = meta_token(str(k), v)
        if token is not None:
            out.add_text("meta", token)
    return out


def _filter(query: tantivy.Query) -> tuple[tantivy.Occur, tantivy.Query]:
    """A MUST clause that scores zero: filters restrict, BM25 alone ranks."""
    return tantivy.Occur.Must, tantivy.Query.const_score_query(query, 0.0)


def _float_range(schema: tantivy.Schema, field: str, lower: float | None, upper: float | None,
                 *, include_lower: bool = True, include_upper: bool = True) -> tantivy.Query:
    return tantivy.Query.range_query(
        schema, field, tantivy.FieldType.Float, lower, upper,
        include_lower=include_lower if lower is not None else True,
        include_upper=include_upper if upper is not None else True)


def filter_clauses(
    schema: tantivy.Schema, corpora: Sequence[str] | None, filters: Filters, now: float,
    rowids: Sequence[int] | None = None,
) -> list[tuple[tantivy.Occur, tantivy.Query]]:
    """The filters of a search as zero-score MUST clauses (the same rows `filter_sql` keeps)."""
    clauses = []
    if corpora is not None:
        clauses.append(_filter(corpus_query(schema, corpora)))
    for name, values in (("kind", filters.kinds), ("scope", filters.scope), ("repo", filters.repo),
                         ("namespace", filters.namespace)):
        if values:
            clauses.append(_filter(tantivy.Query.term_set_query(schema, name, list(values))))
    metadata = list(filters.metadata)
    if filters.languages:  # a file's language is its metadata "language" (ingest/)
        metadata.append(("language", tuple(filters.languages)))
    for key, values in metadata:
        tokens = [t for v in values if (t := meta_token(key, v)) is not None]
        clauses.append(_filter(tantivy.Query.term_set_query(schema, "meta", tokens) if tokens
                               else tantivy.Query.empty_query()))
    if not filters.include_expired:
        clauses.append(_filter(_float_range(schema, "expires", now, None, include_lower=False)))
    if not filters.include_stale:
        clauses.append(_filter(tantivy.Query.term_query(schema, "stale", False)))
    for field, lower, upper in (("created", filters.created_after, filters.created_before),
                                ("updated", filters.updated_after, filters.updated_before)):
        if lower is not None or upper is not None:
            clauses.append(_filter(_float_range(schema, field, lower, upper, include_upper=False)))
    if rowids is not None:
        clauses.append(_filter(tantivy.Query.term_set_query(schema, "rowid", [int(r) for r in rowids])))
    return clauses


def term_words(query: TextQuery, analyze: Any) -> list[list[str]]:
    """Each query term (already split into lowercase words by textquery) through the index's
    analyzer; terms the analyzer empties are dropped."""
    words = ([tok for word in term for tok in analyze(word)] for term in query.terms)
    return [w for w in words if w]


def term_query(schema: tantivy.Schema, words: Sequence[str]) -> tantivy.Query:
    """One analyzed word is a term query, several a phrase."""
    if len(words) == 1:
        return tantivy.Query.term_query(schema, "body", words[0], index_option="freq")
    return tantivy.Query.phrase_query(schema, "body", list(words))


def analyzed(words: Words, analyze: Any) -> list[tuple[int, str]]:
    """A word condition's words through the index's analyzer, each with its place in the
    phrase (from 0). Stopwords are left out but keep their place, as PostgreSQL's
    phraseto_tsquery does ("nothing is impossible": 'noth' <2> 'imposs'), so a phrase
    matches the same documents on both. A prefix: its first token."""
    out: list[tuple[int, str]] = []
    for place, word in enumerate(words.words):
        if words.prefix or word not in STOPWORDS:
            out.extend((place, tok) for tok in analyze(word))
    if not out:
        return []
    if words.prefix:
        return [(0, out[0][1])]
    first = out[0][0]
    return [(place - first, tok) for place, tok in out]


def words_query(schema: tantivy.Schema, field: str, words: Words, analyze: Any) -> tantivy.Query:
    """The documents whose `field` holds `words`: a term, a phrase (each word at its place)
    or, for a prefix, any indexed word starting with its stem (nothing when none is left)."""
    tokens = analyzed(words, analyze)
    if not tokens:
        return tantivy.Query.empty_query()
    if words.prefix:  # the analyzer leaves letters and digits: nothing to escape in the regex
        return tantivy.Query.regex_query(schema, field, re.escape(tokens[0][1]) + ".*")
    if len(tokens) == 1:
        return tantivy.Query.term_query(schema, field, tokens[0][1])
    return tantivy.Query.phrase_query(schema, field, list[str | tuple[int, str]](tokens))


def required_query(schema: tantivy.Schema, match: TextMatch, analyze: Any) -> tantivy.Query | None:
    """Documents holding every required word and title word; None when there are none."""
    must = [words_query(schema, "body", w, analyze) for w in match.required]
    must += [words_query(schema, "title", w, analyze) for w in match.title]
    if not must:
        return None
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in must])


def excluded_query(schema: tantivy.Schema, match: TextMatch, analyze: Any) -> tantivy.Query | None:
    """Documents holding any excluded word; None when nothing is excluded."""
    if not match.excluded:
        return None
    return tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, words_query(schema, "body", w, analyze)) for w in match.excluded])


def match_clauses(schema: tantivy.Schema, match: TextMatch | None,
                  analyze: Any) -> list[tuple[tantivy.Occur, tantivy.Query]]:
    """A query's word conditions as clauses that score zero (filters restrict, BM25 ranks)."""
    if not match:
        return []
    clauses = []
    required = required_query(schema, match, analyze)
    if required is not None:
        clauses.append(_filter(required))
    excluded = excluded_query(schema, match, analyze)
    if excluded is not None:
        clauses.append((tantivy.Occur.MustNot, excluded))
    return clauses


def corpus_query(schema: tantivy.Schema, corpora: Sequence[str]) -> tantivy.Query:
    return tantivy.Query.term_set_query(schema, "corpus", list(corpora))


def search_query(
    schema: tantivy.Schema, terms: Sequence[tantivy.Query],
    filters: Sequence[tuple[tantivy.Occur, tantivy.Query]],
) -> tantivy.Query:
    """(term OR term ...) AND every filter, scored by BM25 over the terms alone."""
    text = tantivy.Query.boolean_query([(tantivy.Occur.Should, t) for t in terms])
    if not filters:
        return text
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, text), *filters])
