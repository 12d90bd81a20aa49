"""Whether a search's filters keep many rows: the choice between the indexes (BM25 blocks,
IVFFlat) and reading the kept rows themselves (full text scored on them alone, vectors
scanned exactly), which is faster and exact when a filter keeps few rows (one
conversation of a memory store) and far slower when it keeps many.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ..contract import SearchArea
from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

BROAD_SHARE = 0.2  # a filter keeping this share of the store is broad, whatever its rows


def keeps_many(conn: Connection[Any], area: SearchArea, min_rows: int) -> bool:
    """Whether the filters keep at least `min_rows` rows or BROAD_SHARE of the store (0:
    always; also when they filter by nothing but corpus, expiry and staleness): else
    full-text search scores only the rows they keep and vector search scans them exactly.
    Only the filters on columns count, by the planner's estimate: those are what an index
    finds the kept rows through. Conditions on JSON values (metadata, paths, languages)
    have no index and no statistics (the planner assumed 0.5% of the rows for an equality,
    so a filter keeping 59% of a million items was scanned exactly: 5 s); the rows they
    keep can only be found by reading every row the column filters keep, which measured
    slower than the index paths even for a filter keeping 0.9% of 1M items (vector 4.3 s
    against 1.1 s, full text 4.2 s against 0.9 s)."""
    if min_rows <= 0:
        return True
    columns = replace(area.filters, metadata=(), paths=None, languages=None)
    if not columns.needs_row_filter:
        return True
    where, params = q.filter_sql(replace(area, filters=columns))
    plan = conn.execute(
        sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM items i WHERE {}").format(where),
        params).fetchone()
    rows = float(plan[0][0]["Plan"]["Plan Rows"]) if plan else 0.0
    total = conn.execute(q.STORE_ITEMS).fetchone()
    share = rows / max(1.0, float(total[0]) if total else 1.0)
    return rows >= min_rows or share >= BROAD_SHARE
