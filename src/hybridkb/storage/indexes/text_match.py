"""A query's word conditions and prefixes over the tantivy index and its delta (SQLite).

`+word`, `-word` and `title:` hold in every retriever (querysyntax.py): the text search
takes them as clauses; the vector and substring searches take the rowids the index and
the delta say hold them. A `prefix*` scores as the words of the corpora searched that
start with its stem, the most frequent first (as PostgreSQL lists them from its BM25
index), counted over the index and the delta alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ...querysyntax import TextMatch
from ...textquery import PREFIX_TERMS, TextQuery
from ..contract import SearchArea
from . import text_schema as ts
from .sync import TextIndexSync
from .text import TextIndex
from .text_delta import TextDelta
from .text_schema import TextDoc


def expand_prefixes(query: TextQuery, index: TextIndex, delta: TextDelta,
                    corpora: Sequence[str] | None) -> TextQuery:
    """The query with each prefix replaced by its PREFIX_TERMS most frequent words."""
    if not query.prefixes:
        return query
    extra: list[tuple[str, ...]] = []
    superseded = delta.rowids
    for prefix in query.prefixes:
        stem, counts = index.prefix_words(prefix, corpora, superseded)
        if not stem:
            continue
        for word, n in delta.prefix_words(stem, corpora, index.analyze).items():
            counts[word] = counts.get(word, 0) + n
        ranked = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0].encode()))
        extra.extend((word,) for word, _ in ranked[:PREFIX_TERMS])
    return query.with_terms(extra)


def match_rows(index: TextIndex, delta: TextDelta, match: TextMatch,
               corpora: Sequence[str] | None) -> tuple[set[int] | None, set[int]]:
    """(the rowids holding every required and title word, None when nothing is required;
    the rowids holding an excluded word). The index's answer leaves out the rowids the
    delta holds newer versions of; the delta answers for those."""
    analyze = index.analyze
    live_required, live_excluded = delta.matching(match, analyze)
    superseded = delta.rowids
    required: set[int] | None = None
    query = ts.required_query(index.schema, match, analyze)
    if query is not None:
        required = index.rows_matching(query, corpora, superseded) | live_required
    excluded: set[int] = set()
    query = ts.excluded_query(index.schema, match, analyze)
    if query is not None:
        excluded = index.rows_matching(query, corpora, superseded) | live_excluded
    return required, excluded


def narrow_rows(rows: Sequence[int] | None, required: set[int] | None,
                excluded: set[int]) -> tuple[list[int] | None, set[int]]:
    """The rows a filtered search may scan (sorted; None: any) and the rowids still to drop
    from its answer: required words narrow the rows; excluded ones leave them when there
    are rows, else are dropped from an answer asked `len(excluded)` deeper."""
    if required is not None:
        keep = required if rows is None else required.intersection(rows)
        return sorted(keep - excluded), set()
    if rows is not None:
        return [r for r in rows if r not in excluded], set()
    return None, excluded


def area_rows(text: TextIndexSync, area: SearchArea,
              rows: Sequence[int] | None) -> tuple[list[int] | None, set[int]]:
    """A search's word conditions as rows to scan and rowids to drop (narrow_rows); `rows`
    unchanged when the search has none."""
    if not area.match:
        return (None if rows is None else list(rows)), set()
    index, delta = text.view()
    return narrow_rows(rows, *match_rows(index, delta, area.match, area.corpora))


def scanned_rows(batches: Iterable[Sequence[TextDoc]], match: TextMatch,
                 analyze: Callable[[str], list[str]]) -> tuple[set[int] | None, set[int]]:
    """match_rows's answer read from the items themselves (the index unusable)."""
    required: set[int] = set()
    excluded: set[int] = set()
    for batch in batches:
        part = TextDelta()
        part.add([(1, d.rowid) for d in batch], batch, analyze, ts.TITLE_REPEAT, 1)
        holding, dropped = part.matching(match, analyze)
        required |= holding
        excluded |= dropped
    return (required if match.required or match.title else None), excluded
