"""When the BM25 index's blocks are merged (migrations 004-005: `hybridkb_bm25_compact`).

Each write statement appends its postings as new blocks, one per (lexeme, corpus, bucket),
and a query reads every block of a bucket, so small blocks are merged:
- as the store doubles, after any batch of a load (`add_many` in batches of any size);
- once small writes have added SMALL_WRITES_MERGE rows and SMALL_WRITES_SHARE of the store
  since the last merge (an agent's memories, one at a time, kept a block per posting: 6,000
  items written one by one held 551,800 blocks, and full text took 47 ms against 17 ms once
  merged; docs/postgres.md). Within one `add_many` this is checked at its end, once;
- on `optimize()`, every bucket of two or more small blocks.
Each write learns in its own transaction whether a merge is due (one statement); the merge
runs after it, in a transaction of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

COMPACT_MIN_ITEMS = 5_000  # no merging as the store doubles below this many items
META_COMPACTED = "pg_bm25_compacted_items"  # items in the store at the last merge
META_COMPACTED_ROWS = "pg_bm25_compacted_rows"  # rows written in all at the last merge
SMALL_WRITES_MERGE = 1_000
SMALL_WRITES_SHARE = 0.05
# The store's own merges merge a bucket's small blocks once it holds this many; `optimize()`
# merges any two (migration 005: large batches leave one or two blocks per bucket, and
# merging those rewrote the whole index for nothing measurable).
AUTO_MIN_BLOCKS = 4
_LOCK = "hybridkb.bm25_compact"

DOUBLED, SMALL = "doubled", "small"


def due(conn: Connection[Any]) -> str | None:
    """Which merge the store is due for: DOUBLED (it doubled since the last merge), SMALL
    (rows written since then call for one), or None."""
    return _due(_state(conn))


def _state(conn: Connection[Any]) -> tuple[int, int, int, int]:
    """Items now and at the last merge; rows written now and at the last merge."""
    row = conn.execute(q.COMPACT_STATE, [META_COMPACTED, META_COMPACTED_ROWS]).fetchone()
    n, done, rows, rows_done = (int(v) for v in row) if row else (0, 0, 0, 0)
    return n, done, rows, rows_done


def _due(state: tuple[int, int, int, int]) -> str | None:
    n, done, rows, rows_done = state
    if n >= COMPACT_MIN_ITEMS and n >= 2 * done:
        return DOUBLED
    if rows - rows_done >= max(SMALL_WRITES_MERGE, SMALL_WRITES_SHARE * n):
        return SMALL
    return None


def merge_if_due(conn: Connection[Any]) -> None:
    """The store's own merge, when still due once this writer's turn has come."""
    if due(conn) is not None:
        compact(conn, AUTO_MIN_BLOCKS, only_if_due=True)


def compact(conn: Connection[Any], min_blocks: int = 2, *, only_if_due: bool = False) -> None:
    """Merge the small blocks of every (lexeme, corpus, bucket) that holds at least
    `min_blocks` of them, in the caller's transaction; concurrent merges take turns, and
    with `only_if_due` this one is skipped when another merged meanwhile."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_LOCK])
    state = _state(conn)
    if only_if_due and _due(state) is None:
        return
    conn.execute("SELECT hybridkb_bm25_compact(%s)", [min_blocks])
    conn.execute(q.SET_META, [META_COMPACTED, str(state[0])])
    conn.execute(q.SET_META, [META_COMPACTED_ROWS, str(state[2])])


class Merges:
    """A store's merges as it writes. `write(work)` runs a write transaction and returns
    what `work` returns (the backend's `_write`)."""

    def __init__(self, write: Callable[[Callable[[Connection[Any]], Any]], Any]) -> None:
        self._write = write
        self._bulk = threading.local()  # per thread: inside an add_many, and a merge owed

    def after(self, found: str | None) -> None:
        """Act on what `due` found in a write's transaction: merge now as the store doubles
        (or after a write outside any add_many); a SMALL merge waits for the end of the
        add_many, so that a load in small batches merges as it doubles, not every 5%."""
        if found == DOUBLED or (found == SMALL and not getattr(self._bulk, "active", False)):
            self._write(merge_if_due)
        elif found == SMALL:
            self._bulk.owed = True

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Around the batches of one add_many (nested ones join it)."""
        if getattr(self._bulk, "active", False):
            yield
            return
        self._bulk.active, self._bulk.owed = True, False
        try:
            yield
        finally:
            owed, self._bulk.active, self._bulk.owed = self._bulk.owed, False, False
        if owed:
            self._write(merge_if_due)
