"""A search's word conditions (`+word`, `-word`, `title:`) for SQLite's vector and substring
searches: the rowids the text index and its delta say hold the words (text_match.py); and
the substring search itself.

The text search takes them as clauses of its own query. When the text index cannot
answer (damaged and not rebuilt), the stored items are read and analyzed instead, with
a note, so an excluded word is never let through.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..contract import ScoredKeys, SearchArea
from ..indexes import text_schema as ts
from ..indexes.sync import TextIndexSync
from ..indexes.text_match import area_rows, narrow_rows, scanned_rows
from . import derived
from .changes import SQLiteChanges
from .driver import SUBSTRING_SEP
from .filters import filter_sql

SCAN_BATCH = 1000


def conditions(text: TextIndexSync, changes: SQLiteChanges, area: SearchArea,
               rows: Sequence[int] | None) -> tuple[list[int] | None, set[int]]:
    """The rows a search may scan (None: any) and the rowids to drop from its answer."""
    try:
        return area_rows(text, area, rows)
    except BaseException as exc:  # raised again unless the index failed (derived.py)
        derived.unusable(exc, text, "full-text", "a scan of the stored items")
        assert area.match
        found = scanned_rows(changes.iter_text_docs(SCAN_BATCH), area.match, ts.analyzer().analyze)
        return narrow_rows(rows, *found)


def vector_rows(text: TextIndexSync, changes: SQLiteChanges, area: SearchArea,
                rows: Any) -> tuple[Any, set[int]]:
    """A vector search's rows (a sorted array, None: any) narrowed by the word conditions,
    and the rowids to drop from its answer (asked that many deeper)."""
    if not area.match:
        return rows, set()
    allowed, excluded = conditions(text, changes, area, None if rows is None else rows.tolist())
    return (None if allowed is None else np.asarray(allowed, dtype=np.int64)), excluded


def substring_where(text: TextIndexSync, changes: SQLiteChanges, area: SearchArea, where: str,
                    params: list[Any]) -> tuple[str, list[Any], set[int]]:
    """A substring search's WHERE narrowed to the rows holding the required words, and the
    rowids holding an excluded one."""
    if not area.match:
        return where, params, set()
    rows, excluded = conditions(text, changes, area, None)
    if rows is None:
        return where, params, excluded
    return where + " AND i.rowid IN (SELECT value FROM json_each(?))", [*params, json.dumps(rows)], excluded


def substring_hits(read: Callable[[str, Sequence[Any]], list[Any]], text: TextIndexSync,
                   changes: SQLiteChanges, words: Sequence[str], area: SearchArea,
                   limit: int) -> ScoredKeys:
    """The items whose text or title holds the most of `words` (lowercase), by rowid, with
    how many of text and title hold each word: the search of last resort. The stored texts
    are unpacked in SQL by `hybridkb_substring_hits` (driver.py), each once."""
    where, params = filter_sql(area)
    where, params, excluded = substring_where(text, changes, area, where, params)
    sql = (f"SELECT i.rowid, hybridkb_substring_hits(i.text, i.title, ?) AS s FROM items i "
           f"WHERE {where} AND s > 0 ORDER BY s DESC, i.id LIMIT ?")
    found = read(sql, [SUBSTRING_SEP.join(words), *params, limit + len(excluded)])
    return [(r[0], float(r[1])) for r in found if r[0] not in excluded][:limit]
