"""The SQLite side of the derived indexes: the change log and the items read as documents.

The `changes` table (migration 004) is filled by triggers in the same transaction as the
write, so a committed write always has its sequence number and a rolled-back one never
does. This module only reads it (and prunes what every index has passed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ...model import Item
from .. import asked, codec
from ..indexes.text_schema import TextDoc
from ..indexes.vector_batch import Batch
from ..textcodec import unpack, unpacked_rows
from .tables import chunks, marks

Read = Callable[[str, Sequence[Any]], list[Any]]

DOC_COLUMNS = ("rowid, title, text, corpus, kind, scope, repo, namespace, metadata, created_at, "
                "updated_at, expires_at, stale")
_TEXT_OPS = "('i', 'u', 'd')"
# Vectors and the attributes the vector index masks on (corpus, expiry, staleness).
_VECTOR_OPS = "('i', 'u', 'v', 'd')"


def text_doc(row: Sequence[Any]) -> TextDoc:
    try:
        metadata = json.loads(row[8] or "{}")
    except ValueError:
        metadata = {}
    return TextDoc(
        rowid=int(row[0]), title=row[1], text=unpack(row[2]) or "", corpus=row[3], kind=row[4], scope=row[5],
        repo=row[6], namespace=row[7], metadata=metadata if isinstance(metadata, dict) else {},
        created_at=float(row[9] or 0.0), updated_at=float(row[10] or 0.0),
        expires_at=row[11], stale=bool(row[12]))


def doc_of_item(rowid: int, item: Item) -> TextDoc:
    """The document of an item just inserted (what `text_doc` would read back from its row:
    metadata through JSON, as stored)."""
    metadata = item.metadata if isinstance(item.metadata, dict) else {}
    return TextDoc(
        rowid=int(rowid), title=item.title, text=item.text or "", corpus=item.corpus, kind=item.kind,
        scope=item.scope, repo=item.repo, namespace=item.namespace, metadata=metadata,
        created_at=float(item.created_at or 0.0), updated_at=float(item.updated_at or 0.0),
        expires_at=item.expires_at, stale=bool(item.stale))


class SQLiteChanges:
    """indexes.sync.ChangeSource over one SQLite store (reads through the backend's lock)."""

    def __init__(self, read: Read, write: Callable[[], Any], store_id: str,
                 connect: Callable[[], Any] | None = None,
                 memo: Callable[[str, Callable[[], Any]], Any] = lambda _name, compute: compute()
                 ) -> None:
        self._read = read
        self._memo = memo  # answers kept until the store changes (reads.Memo)
        self._write = write  # the backend's write transaction (a context manager)
        self._connect = connect  # a new connection, for long reads (None: ":memory:")
        self.store_id = store_id

    def published(self, name: str, *, fresh: bool = False) -> tuple[str, int, int] | None:
        """The generation recorded for index `name`, its seq and dimension (`fresh`: read
        now, not an answer kept since the store last changed)."""
        sql = "SELECT generation, seq, dim FROM derived_indexes WHERE name = ?"
        rows = self._read(sql, (name,)) if fresh else self._memo(
            f"published {name}", lambda: self._read(sql, (name,)))
        return (str(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else None

    def publish(self, name: str, generation: str, seq: int, dim: int) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO derived_indexes (name, generation, seq, dim) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET generation = excluded.generation, "
                "seq = excluded.seq, dim = excluded.dim", (name, generation, int(seq), int(dim)))

    def log_bounds(self) -> tuple[int, int]:
        oldest, head = self._memo("log bounds", lambda: self._read(
            "SELECT (SELECT min(seq) FROM changes), "
            "(SELECT seq FROM sqlite_sequence WHERE name = 'changes')", ())[0])
        head = int(head or 0)
        return (int(oldest) if oldest is not None else head + 1), head

    def _changed(self, ops: str, seq: int, limit: int) -> tuple[list[tuple[int, int]], int]:
        _, head = self.log_bounds()
        rows = self._read(
            f"SELECT seq, item_rowid FROM changes WHERE seq > ? AND seq <= ? AND op IN {ops} "
            f"ORDER BY seq LIMIT ?", (seq, head, limit))
        reached = int(rows[-1][0]) if len(rows) == limit else head
        return [(int(r[0]), int(r[1])) for r in rows], reached

    def deleted_since(self, seq: int, rowids: Sequence[int]) -> set[int]:
        """Which of `rowids` the log shows an item deleted from after `seq`."""
        return {int(r) for chunk in chunks(rowids) for (r,) in self._read(
            f"SELECT item_rowid FROM changes WHERE seq > ? AND op = 'd' "
            f"AND item_rowid IN ({marks(len(chunk))})", [seq, *chunk])}

    def changed_since(self, seq: int, limit: int) -> tuple[list[int], int]:
        pairs, reached = self.text_changes(seq, limit)
        return list(dict.fromkeys(r for _, r in pairs)), reached

    def text_changes(self, seq: int, limit: int) -> tuple[list[tuple[int, int]], int]:
        return self._changed(_TEXT_OPS, seq, limit)

    def vector_changes(self, seq: int, limit: int) -> tuple[list[tuple[int, int]], int]:
        return self._changed(_VECTOR_OPS, seq, limit)

    def text_docs(self, rowids: Sequence[int]) -> list[TextDoc]:
        docs: list[TextDoc] = []
        for chunk in chunks(rowids):
            docs.extend(text_doc(r) for r in unpacked_rows(self._read(
                f"SELECT {DOC_COLUMNS} FROM items WHERE rowid IN ({marks(len(chunk))})",
                list(chunk)), 2))
        return docs

    def asked_queries(self, dim: int) -> tuple[Any, int]:
        """The store's recent query vectors of `dim` (None when too few: asked.py) and the
        newest one's seq."""
        return asked.decode(self._read(asked.recent_sql("?"), (dim, asked.MEASURED)), dim)

    def asked_after(self, dim: int, seq: int) -> int:
        return int(self._read(asked.count_after_sql("?"), (dim, seq))[0][0])

    def item_count(self) -> int:
        return int(self._read("SELECT count(*) FROM items", ())[0][0])

    def iter_text_docs(self, batch_size: int) -> Iterator[list[TextDoc]]:
        last = 0
        while True:
            rows = self._read(f"SELECT {DOC_COLUMNS} FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?",
                              (last, batch_size))
            if not rows:
                return
            last = int(rows[-1][0])
            yield [text_doc(r) for r in unpacked_rows(rows, 2)]

    def item_rowids(self) -> list[int]:
        return [int(r[0]) for r in self._read("SELECT rowid FROM items ORDER BY rowid", ())]

    # -- vectors --------------------------------------------------------------------------------

    def vectors(self, rowids: Sequence[int], dim: int) -> Batch:
        """The rows of `rowids` that have a vector, ascending, with their filter attributes.
        Items drive the join: the vectors are read by rowid."""
        wanted = sorted({int(r) for r in rowids})
        rows: list[Any] = []
        for chunk in chunks(wanted):
            rows.extend(self._read(
                _VECTOR_ROW + f" WHERE i.rowid IN ({marks(len(chunk))}) ORDER BY i.rowid", chunk))
        return _batch(rows, dim)

    def stored_vectors(self, rowids: Sequence[int], dim: int) -> tuple[Any, Any]:
        """(rowids, the stored values as float32 rows) of those of `rowids` that have a vector
        now: the vector table alone (an int8 vector base's exact pass, vector_knn.knn:
        reading the items' columns as well cost 1.7x for 330 rows)."""
        found: list[Any] = []
        for chunk in chunks(sorted({int(r) for r in rowids})):
            found.extend(self._read(
                f"SELECT rowid, embedding FROM vec_items WHERE rowid IN ({marks(len(chunk))})", chunk))
        return (np.array([r[0] for r in found], dtype=np.int64),
                codec.matrix_from_stored_blobs([r[1] for r in found], dim))

    def iter_vectors(self, dim: int, batch_size: int = 4096) -> Iterator[Batch]:
        """Every vector in rowid order, read on a connection of its own in one transaction
        (a consistent snapshot that never holds the store's lock)."""
        if self._connect is None:
            return
        conn = self._connect()
        try:
            conn.execute("BEGIN")
            cursor = conn.execute(_VECTOR_ROW + " ORDER BY i.rowid")
            while rows := cursor.fetchmany(batch_size):
                yield _batch(rows, dim)
            conn.execute("COMMIT")
        finally:
            conn.close()

    def vector_count(self) -> int:
        """Items with a vector: all items but the unembedded ones, both counted from an
        index (the items_unembedded partial index holds every row without a vector). A
        plain count of `embedded_hash IS NOT NULL` reads every row: 0.3-1 s at 1M items,
        run at the end of each bulk load; this takes 5 ms."""
        return int(self._read(_VECTOR_COUNT, ())[0][0])


# Items drive the scan (CROSS JOIN keeps them outer): rowid order comes free, and the
# vectors are looked up by rowid in the same order (their pages read in sequence).
_VECTOR_ROW = ("SELECT i.rowid, v.embedding, i.corpus, i.expires_at, i.stale "
               "FROM items i CROSS JOIN vec_items v ON v.rowid = i.rowid")


_VECTOR_COUNT = ("SELECT (SELECT count(*) FROM items) - (SELECT count(*) FROM items "
                 "INDEXED BY items_unembedded WHERE (embedded_hash IS NULL OR "
                 "embedded_hash != content_hash) AND embedded_hash IS NULL)")


def _batch(rows: Sequence[Any], dim: int) -> Batch:
    """The rows with their stored int8 codes and scales, decoded only when asked (Batch)."""
    codes, scales = codec.codes_from_stored_blobs([r[1] for r in rows], dim)
    return Batch(
        rowids=np.array([r[0] for r in rows], dtype=np.int64),
        vectors=None,
        corpora=[r[2] for r in rows],
        expires=np.array([np.inf if r[3] is None else float(r[3]) for r in rows], dtype=np.float64),
        stale=np.array([bool(r[4]) for r in rows], dtype=bool), codes=codes, scales=scales)


def prune(conn: Any, through: int) -> int:
    """Drop log rows every derived index has passed (inside the caller's write transaction)."""
    return int(conn.execute("DELETE FROM changes WHERE seq <= ?", (int(through),)).rowcount)


def prune_passed(conn: Any, text_seq: int | None, *, has_vectors: bool) -> int:
    """Drop the log rows both derived indexes on disk have passed: the text index's
    (`text_seq`, None when it has none) and the published vector base's."""
    row = conn.execute("SELECT seq FROM derived_indexes WHERE name = 'vectors'").fetchone()
    vector_seq = None if row is None else int(row[0])
    if not has_vectors:
        vector_seq = text_seq  # no vectors: only the text index reads the log
    if text_seq is None or vector_seq is None:
        return 0
    return prune(conn, min(text_seq, vector_seq))
