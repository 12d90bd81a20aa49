"""Whether a search's filters keep many rows: the choice between the indexes (BM25 blocks,
IVFFlat) and reading the kept rows themselves (full text scored on them alone, vectors
scanned exactly), which is faster and exact when a filter keeps few rows (one
conversation of a memory store) and far slower when it keeps many.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ..contract import SearchArea
from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

BROAD_SHARE = 0.2  # a filter keeping this share of the store is broad, whatever its rows
# What a kept row costs the exact paths against what a candidate costs the index paths
# (below); measured on the benchmark's items with metadata filters keeping 0.9% to 26%.
KEPT_ROW_COST = 5.0


def most_kept_rows(store_items: float, depth: int) -> float:
    """The most rows a selective filter keeps: past it the index paths are faster. The
    exact paths read every kept row; the index paths read about depth * store / kept
    candidates before `depth` of them pass, so the two cost the same at
    sqrt(KEPT_ROW_COST * depth * store) kept rows. Measured (2026-11-27; git history of
    docs/benchmarks.md): at 1,000,000 items the kept rows were faster up to 26,448 (2.6%) and the
    indexes from 52,896 (5.3%); at 100,000, 8,816 (8.8%) and 17,632; this gives 38,700
    and 12,200 at a depth of 300."""
    return math.sqrt(KEPT_ROW_COST * max(depth, 10) * max(store_items, 0.0))


def keeps_many(conn: Connection[Any], area: SearchArea, min_rows: int | None,
               depth: int = 300) -> bool:
    """Whether the filters keep at least `min_rows` rows (None: most_kept_rows; 0: always)
    or BROAD_SHARE of the store (also when they filter by nothing but corpus, expiry and
    staleness): else full-text search scores only the rows they keep and vector search
    scans them exactly."""
    if min_rows is not None and min_rows <= 0:
        return True
    return many(estimate(conn, area), min_rows, depth)


def many(estimated: tuple[float, float] | None, min_rows: int | None, depth: int = 300) -> bool:
    """keeps_many on an `estimate` already made."""
    if estimated is None or (min_rows is not None and min_rows <= 0):
        return True
    rows, total = estimated
    most = most_kept_rows(total, depth) if min_rows is None else float(min_rows)
    return rows >= most or rows / total >= BROAD_SHARE


def estimate(conn: Connection[Any], area: SearchArea) -> tuple[float, float] | None:
    """The rows the filters keep and the store's items, or None when they filter by
    nothing but corpus, expiry and staleness.
    Counted by the planner's estimate of the conditions an index finds rows through: the
    columns, and each metadata (or language) filter as containment, which the planner
    estimates from the column's statistics and the GIN index on metadata serves. Not the
    JSON equality itself: the planner guesses 0.5% of the rows for it, which once made a
    filter keeping 59% of a million items count as selective (an exact scan: 5 s). Path
    patterns count by their literal prefixes (the index on metadata.path); one that
    matches a name at any depth (`*.md`) counts as keeping every row."""
    f = area.filters
    indexed = replace(f, metadata=(), paths=None, languages=None)
    contained = [c for key, values in (*f.metadata, *([("language", f.languages)]
                                                       if f.languages else []))
                 if (c := q.metadata_containment("i", key, values)) is not None]
    if f.paths and (prefixed := q.path_prefixes("i", f.paths)) is not None:
        contained.append(prefixed)
    if not (indexed.needs_row_filter or contained):
        return None
    where, params = q.filter_sql(replace(area, filters=indexed))
    for clause, values in contained:
        where = sql.SQL("{} AND {}").format(where, sql.SQL(clause))
        params = [*params, *values]
    plan = conn.execute(
        sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM items i WHERE {}").format(where),
        params).fetchone()
    rows = float(plan[0][0]["Plan"]["Plan Rows"]) if plan else 0.0
    found = conn.execute(q.STORE_ITEMS).fetchone()
    return rows, max(1.0, float(found[0]) if found else 1.0)
