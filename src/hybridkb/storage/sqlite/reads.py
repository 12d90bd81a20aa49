"""Reads every search repeats, kept until the store changes (issue #15: a search ran about
14 SQL statements around the engines; most asked what the previous search had asked).

SQLite tells a connection when another one committed (`PRAGMA data_version`); with the
backend's count of its own write transactions that makes a token that changes whenever
an answer may have: the meta table, the change log's bounds, the published vector base,
the corpus counts and whether items wait for a vector are kept per token. A search reads
the token once (`SQLiteBackend.pinned_reads`).

The pairs a map lacks are read from `item_keys` (migration 005), a narrow copy of items'
rowid and id kept by triggers: its pages stay cached where the wide items table's do not.
Rowid -> id pairs outlive writes: a rowid names one item until that item is deleted (an
item written later may reuse it), so after a write only the pairs of rowids the change
log shows deleted are dropped. The same pairs read backwards let a search read its items
by rowid (the table's own key) instead of through the id index; the reader checks each
row's id, since a pair may be older than the row. All of this is called under the
backend's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from .tables import chunks, marks

Read = Callable[[str, Sequence[Any]], list[Any]]

# Past this many deletions since the map was last in step, drop it whole (one read of the
# log instead of many); past this many pairs, start over (bounded memory).
_REPLAY_MAX = 10_000
_PAIRS_MAX = 300_000


class Memo:
    """Answers kept while the token they were read under stays the same."""

    def __init__(self) -> None:
        self._key: object = None
        self._values: dict[str, Any] = {}

    def get(self, name: str, key: object, compute: Callable[[], Any]) -> Any:
        if key != self._key:
            self._values = {}
            self._key = key
        if name not in self._values:
            self._values[name] = compute()
        return self._values[name]


class IdMap:
    """Rowid -> item id, filled by the lookups searches make and kept in step with the log."""

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}
        self._rowids: dict[str, int] = {}  # the same pairs, id -> rowid
        self._seq: int | None = None  # the log sequence the pairs are known good through

    def scored(self, top: Sequence[tuple[int, float]], bounds: tuple[int, int],
               read: Read) -> list[tuple[str, float]]:
        """`top`'s (rowid, score) pairs as (id, score), in order; a rowid naming no item is
        dropped. One lookup per pair when the map holds them all (the usual search)."""
        self._sync(bounds, read)
        rowids = [r for r, _ in top]
        found = list(map(self._ids.get, rowids))
        if None in found:
            self._fill(rowids, read)
            found = list(map(self._ids.get, rowids))
            return [(i, s) for i, (_, s) in zip(found, top, strict=True) if i is not None]
        return list(zip(cast("list[str]", found), [s for _, s in top], strict=True))

    def rowids_of(self, ids: Sequence[str]) -> dict[str, int]:
        """The rowids last known for `ids` (those the map holds): a hint, checked by the
        reader against each row's id (the item may have been deleted or rewritten since)."""
        return {i: r for i in ids if (r := self._rowids.get(i)) is not None}

    def _clear(self) -> None:
        self._ids.clear()
        self._rowids.clear()

    def _sync(self, bounds: tuple[int, int], read: Read) -> None:
        """Drop the pairs of rowids deleted since the map was last in step with the log."""
        oldest, head = bounds
        if self._seq != head:
            if self._seq is None or self._seq < oldest - 1 or head - self._seq > _REPLAY_MAX:
                self._clear()  # the log no longer joins the map (or too much changed)
            else:
                for (rowid,) in read("SELECT item_rowid FROM changes WHERE seq > ? AND op = 'd'",
                                     (self._seq,)):
                    gone = self._ids.pop(int(rowid), None)
                    if gone is not None and self._rowids.get(gone) == int(rowid):
                        del self._rowids[gone]
            self._seq = head

    def _fill(self, rowids: list[int], read: Read) -> None:
        """Read the pairs of `rowids` the map lacks. Starting over (the map full) reads every
        one of them: those it held would otherwise look deleted."""
        wanted = list(dict.fromkeys(rowids))
        missing = [r for r in wanted if r not in self._ids]
        if not missing:
            return
        if len(self._ids) + len(missing) > _PAIRS_MAX:
            self._clear()
            missing = wanted
        for chunk in chunks(missing):
            sql = f"SELECT rowid, id FROM item_keys WHERE rowid IN ({marks(len(chunk))})"
            for rowid, item_id in read(sql, chunk):
                self._ids[rowid] = item_id
                self._rowids[item_id] = rowid
