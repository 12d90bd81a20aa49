"""Writing items and vectors on PostgreSQL: one batch per transaction; COPY (binary) for new
items and their vectors, and the vector index (ann.py) built again once instead of fed one
row at a time when a batch is as large as the store.

COPY skips the SQL layer's per-row work (parsing the array parameters, one executor tuple
per unnested row); the item rows still go through the same triggers (statistics, BM25
index) and indexes as an INSERT, in the caller's transaction. A batch that at least
doubles the vectors drops the vector index and builds it again at the end of the same
transaction, so that its lists are chosen over all the rows (vector searches wait for
that transaction meanwhile; smaller batches join the nearest lists of the live index).
The GIN index of the tsvectors follows the same rule for a COPY batch at least as large as
the store (full-text searches wait for the transaction meanwhile).

With BM25_BY_CLIENT (the default), a COPY batch's BM25 blocks are built by the client
(postings.py), `packed` bytes included, with the insert trigger switched off: the batch
goes in parts, and the client parses one part's tsvectors while the server writes the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg import sql
from psycopg.copy import QueuedLibpqWriter

from ...errors import NotFoundError
from ...model import Item
from .. import codec, records
from ..contract import Vector
from . import ann, postings
from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

COPY_MIN_BATCH = 100  # smaller batches: one INSERT ... SELECT unnest(...) is as fast
INDEX_REBUILD_MIN = 5_000  # vectors in one batch before the index may be rebuilt for it
GIN_REBUILD_MIN = 5_000  # new items in one COPY batch before the GIN index may be rebuilt for it
# A COPY batch's BM25 blocks built in the client (postings.py) instead of by the trigger.
# On since the blocks' `packed` bytes come from the client too (migration 016): four
# 100,000-item loads took 0.71-0.82x the server CPU and 0.73-0.85x the wall time of the
# trigger's, for 17-23 s more client CPU (2026-11-28; git history of docs/postgres.md).
BM25_BY_CLIENT = True
COPY_PART = 5_000  # rows per COPY statement of a batch; the client parses one meanwhile
LOCK_VECTORS = "hybridkb.vectors"

_COPY_ITEMS = sql.SQL("COPY items ({}) FROM STDIN (FORMAT BINARY)").format(
    sql.SQL(", ").join(sql.Identifier(c) for c in records.WRITE_COLUMNS))
# The full-text index of migration 001, built again after a batch as large as the store.
CREATE_GIN = "CREATE INDEX IF NOT EXISTS items_tsv ON items USING gin (tsv)"
_COPY_VECTORS = sql.SQL("COPY item_vectors (rowid, embedding) FROM STDIN (FORMAT BINARY)")
_WRITTEN = sql.SQL("SELECT rowid, id, embedded_hash FROM items WHERE id = ANY(%s)")
_WRITTEN_POSTINGS = (f"SELECT rowid, id, embedded_hash, corpus, tsvectorsend(tsv), "
                     f"{postings.LENGTH_CLASS} FROM items WHERE id = ANY(%s) ORDER BY rowid")
_METADATA = records.WRITE_COLUMNS.index("metadata")


def _copy(conn: Connection[Any], columns: list[list[Any]],
          meanwhile: Callable[[], None] | None = None) -> None:
    """One COPY of rows. With `meanwhile`, a thread sends the rows, and `meanwhile` runs
    once they are queued, before the server's answer is awaited."""
    cursor = conn.cursor()
    writer = QueuedLibpqWriter(cursor) if meanwhile is not None else None
    with cursor.copy(_COPY_ITEMS, writer=writer) as copy:
        copy.set_types(list(q.WRITE_TYPES))
        for row in zip(*columns, strict=True):
            values = list(row)
            values[_METADATA] = json.loads(values[_METADATA])  # the jsonb dumper encodes it
            copy.write_row(values)
        if meanwhile is not None:
            meanwhile()


def copy_items(conn: Connection[Any], columns_of: Callable[[int, int], list[list[Any]]],
               size: int) -> list[tuple[int, str, str | None]]:
    """COPY `size` new items, whose values (by WRITE_COLUMNS) `columns_of(start, stop)`
    computes; (rowid, id, embedded_hash) of each. An id that exists already fails the COPY
    (UniqueViolation), as INSERT does.

    With BM25_BY_CLIENT, in COPY statements of COPY_PART rows with the BM25 trigger off:
    while the server writes a part, the client computes the next part's values (each
    item's word print is most of that) and parses the previous part's tsvectors, read back
    with its rowids; the blocks of the whole batch go in at the end, one per (lexeme,
    corpus, bucket), as the trigger writes them for one statement.
    """
    if not BM25_BY_CLIENT:
        columns = columns_of(0, size)
        _copy(conn, columns)
        return [(int(r[0]), r[1], r[2]) for r in conn.execute(_WRITTEN, [columns[0]]).fetchall()]
    conn.execute(postings.SET_BY_CLIENT, ["on"])
    rows: list[tuple[int, str, str | None]] = []
    joined = postings.Joiner()
    pending: list[tuple[Any, ...]] = []
    part = columns_of(0, min(COPY_PART, size))
    ahead: list[list[list[Any]]] = []

    def parse_pending() -> None:
        if pending:
            joined.add(postings.parse([r[3] for r in pending], [r[4] for r in pending],
                                      np.array([r[5] for r in pending], np.int64)))

    for start in range(0, size, COPY_PART):
        following = start + COPY_PART

        def meanwhile(following: int = following) -> None:
            parse_pending()
            if following < size:
                ahead.append(columns_of(following, min(following + COPY_PART, size)))

        _copy(conn, part, meanwhile)
        pending = conn.cursor(binary=True).execute(_WRITTEN_POSTINGS, [part[0]]).fetchall()
        rows += [(int(r[0]), r[1], r[2]) for r in pending]
        if ahead:
            part = ahead.pop()
    conn.execute(postings.SET_BY_CLIENT, ["off"])
    parse_pending()
    postings.write_blocks(conn, [r[0] for r in rows], joined.result())
    return rows


def copy_vectors(conn: Connection[Any], rowids: Sequence[int], vectors: Sequence[Vector]) -> None:
    """COPY vectors of rows that have none yet."""
    with conn.cursor().copy(_COPY_VECTORS) as copy:
        copy.set_types(["int8", "vector"])
        for rowid, vec in zip(rowids, vectors, strict=True):
            copy.write_row((rowid, vec))


def rebuild_index_for(conn: Connection[Any], batch: int) -> bool:
    """Whether a batch of `batch` vectors should drop the vector index (to build it again
    once written): at least INDEX_REBUILD_MIN of them, and at least as many as are stored."""
    if batch < INDEX_REBUILD_MIN:
        return False
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'item_vectors'::regclass").fetchone()
    stored = float(row[0]) if row else 0.0
    if stored < 0:  # never analyzed: count
        counted = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
        stored = float(counted[0]) if counted else 0.0
    return batch >= stored


def rebuild_gin_for(conn: Connection[Any], batch: int) -> bool:
    """Whether a COPY batch of `batch` new items should drop the GIN index of the
    tsvectors (to build it again once written): at least GIN_REBUILD_MIN of them, and at
    least as many as the store holds. Building it over all rows cost a fifth of the CPU
    of inserting the same rows into it one by one (20,000 benchmark items: 0.7 s against
    3.2 s)."""
    if batch < GIN_REBUILD_MIN:
        return False
    row = conn.execute(q.STORE_ITEMS).fetchone()
    return batch >= (int(row[0]) if row else 0)


def lock(conn: Connection[Any], name: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


def prepare_vector_write(conn: Connection[Any], dim: int | None, indexed: bool,
                         any_vectors: bool) -> bool:
    """Whether this write may have to build the vector index; if so, take the lock first.

    Until the index exists, writers of vectors take turns (an advisory lock, taken
    before any row is written so that no two of them wait on each other's rows).
    """
    build = dim is not None and any_vectors and not indexed
    if build:
        lock(conn, LOCK_VECTORS)
    return build


def put_vectors(conn: Connection[Any], rowids: Sequence[int], vectors: Sequence[Vector],
                dim: int, build: bool, index_min_rows: int, *, fresh: bool = False) -> None:
    """Write vectors (`fresh`: of new rows, by COPY); build the vector index if `build`
    and the store has reached index_min_rows vectors."""
    if rowids and fresh:
        copy_vectors(conn, rowids, codec.to_pg(vectors))
    elif rowids:
        conn.execute(q.UPSERT_VECTORS, [list(rowids), codec.to_pg(vectors)])
    if build:
        n = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
        if n is not None and n[0] >= index_min_rows:
            ann.build(conn, dim)


class Batch:
    """One upsert: items with their vectors (None: keep none), written in one transaction."""

    def __init__(self, items: Sequence[Item], vectors: Sequence[Vector | None],
                 content_hashes: Sequence[str], *, replace: bool,
                 prints: Sequence[int] | None = None, within: Sequence[str] | None = None
                 ) -> None:
        self.items, self.vectors, self.replace = list(items), list(vectors), replace
        self.within = None if within is None else list(within)
        self.hashes = list(content_hashes)
        self.prints = list(records.given_prints(prints, len(self.items)))
        self.with_vectors = [(item, vec) for item, vec in zip(items, vectors, strict=True)
                             if vec is not None]

    def columns(self, start: int = 0, stop: int | None = None) -> list[list[Any]]:
        """The WRITE_COLUMNS values of items[start:stop], column by column. Computed as
        they are written (an item's word print is most of the work), so that a COPY
        batch computes a part while the server writes the one before (copy_items)."""
        columns: list[list[Any]] = [[] for _ in records.WRITE_COLUMNS]
        span = slice(start, stop)
        for item, vec, chash, print_ in zip(self.items[span], self.vectors[span],
                                            self.hashes[span], self.prints[span], strict=True):
            values = records.write_values(item, chash, with_vector=vec is not None, print_=print_)
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        return columns

    def write(self, conn: Connection[Any], index_min_rows: int) -> None:
        items, vectors = self.items, self.vectors
        dim, probes = ann.state(conn)
        indexed = probes is not None
        codec.check_dims(((item.id, vec) for item, vec in self.with_vectors), dim)
        build = prepare_vector_write(conn, dim, indexed, bool(self.with_vectors))
        fresh = not self.replace and len(items) >= COPY_MIN_BATCH
        statement = q.UPSERT if self.replace else q.INSERT
        gin = fresh and rebuild_gin_for(conn, len(items))
        if gin:  # searches wait for this transaction from here (the drop locks the table)
            conn.execute("DROP INDEX IF EXISTS items_tsv")
        if self.replace and self.within is not None:
            rows = conn.execute(q.UPSERT_WITHIN, [*self.columns(), self.within]).fetchall()
            returned = {r[1] for r in rows}
            for item in items:  # no row came back: it is another corpus's (the WHERE held it)
                if item.id not in returned:
                    raise NotFoundError(f"no item with id {item.id!r} to replace in corpora "
                                        f"{', '.join(self.within)}")
        else:
            rows = (copy_items(conn, self.columns, len(items)) if fresh
                    else conn.execute(statement, self.columns()).fetchall())
        if gin:
            conn.execute(CREATE_GIN)
        written = {r[1]: (r[0], r[2]) for r in rows}
        if dim is None:
            return
        dropped = [rowid for item, vec in zip(items, vectors, strict=True)
                   for rowid, kept in (written[item.id],) if vec is None and kept is None]
        if dropped:
            conn.execute("DELETE FROM item_vectors WHERE rowid = ANY(%s)", [dropped])
        if indexed and rebuild_index_for(conn, len(self.with_vectors)):
            lock(conn, LOCK_VECTORS)
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(ann.INDEX)))
            build = True
        put_vectors(conn, [written[item.id][0] for item, _ in self.with_vectors],
                    [vec for _, vec in self.with_vectors], dim, build, index_min_rows, fresh=fresh)
