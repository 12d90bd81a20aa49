"""Whether a search's filters keep many rows: the choice between the indexes (BM25 blocks,
IVFFlat) and reading the kept rows themselves (full text scored on them alone, vectors
scanned exactly), which is faster and exact when a filter keeps few rows (one
conversation of a memory store) and far slower when it keeps many.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from ..contract import SearchArea
from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

BROAD_SHARE = 0.2  # a filter keeping this share of the store is broad, whatever its rows
SAMPLE_ROWS = 1_000  # rows sampled (whole pages) to count a filter on JSON values


def keeps_many(conn: Connection[Any], area: SearchArea, min_rows: int) -> bool:
    """Whether the filters keep at least `min_rows` rows or BROAD_SHARE of the store (0:
    always): else full-text search scores only the rows they keep and vector search scans
    them exactly. The planner's estimate decides, but for conditions on JSON values
    (metadata, paths, languages), of which it keeps no statistics (it assumed 0.5% of the
    rows for any equality, so a filter keeping 59% of a million items was scanned
    exactly: 5 s): those are counted in a sample of about SAMPLE_ROWS rows."""
    if min_rows <= 0:
        return True
    where, params = q.filter_sql(area)
    total_row = conn.execute(q.STORE_ITEMS).fetchone()
    total = max(1.0, float(total_row[0]) if total_row else 1.0)
    f = area.filters
    rows = None
    if f.metadata or f.paths or f.languages:
        percent = min(100.0, 100.0 * SAMPLE_ROWS / total)
        counted = conn.execute(sql.SQL(
            "SELECT count(*) FILTER (WHERE {}), count(*) FROM items i "
            "TABLESAMPLE SYSTEM (%s) REPEATABLE (15)").format(where), [*params, percent]).fetchone()
        if counted and counted[1]:  # an empty sample (a tiny or empty table): the planner
            rows = float(counted[0]) / float(counted[1]) * total
    if rows is None:
        plan = conn.execute(
            sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM items i WHERE {}").format(where),
            params).fetchone()
        rows = float(plan[0][0]["Plan"]["Plan Rows"]) if plan else 0.0
    return rows >= min_rows or rows / total >= BROAD_SHARE
