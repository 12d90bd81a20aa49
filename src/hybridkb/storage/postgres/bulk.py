"""Large writes on PostgreSQL: COPY (binary) for new items and their vectors, and an HNSW
index rebuilt once instead of fed one row at a time when a batch is as large as the store.

COPY skips the SQL layer's per-row work (parsing the array parameters, one executor tuple
per unnested row); the item rows still go through the same triggers (statistics, BM25
index) and indexes as an INSERT, in the caller's transaction. Inserting a vector into a
live HNSW graph costs milliseconds (a graph search per row); building the index over all
rows at once is several times cheaper per row, so a batch that at least doubles the
vectors drops the index and builds it again at the end of the same transaction (vector
searches wait for that transaction meanwhile; smaller batches go into the live graph).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg import sql

from .. import records
from ..contract import Vector

if TYPE_CHECKING:
    from psycopg import Connection

COPY_MIN_BATCH = 100  # smaller batches: one INSERT ... SELECT unnest(...) is as fast
HNSW_REBUILD_MIN = 5_000  # vectors in one batch before the index may be rebuilt for it

_TYPES = ("text", "text", "text", "text", "text", "text", "text", "text", "text", "jsonb",
          "float8", "float8", "float8", "int8", "float8", "bool", "text", "text")
_COPY_ITEMS = sql.SQL("COPY items ({}) FROM STDIN (FORMAT BINARY)").format(
    sql.SQL(", ").join(sql.Identifier(c) for c in records.WRITE_COLUMNS))
_COPY_VECTORS = sql.SQL("COPY item_vectors (rowid, embedding) FROM STDIN (FORMAT BINARY)")
_WRITTEN = sql.SQL("SELECT rowid, id, embedded_hash FROM items WHERE id = ANY(%s)")
_METADATA = records.WRITE_COLUMNS.index("metadata")


def copy_items(conn: Connection[Any], columns: list[list[Any]]) -> list[tuple[int, str, str | None]]:
    """COPY new items (values by WRITE_COLUMNS); (rowid, id, embedded_hash) of each.
    An id that exists already fails the COPY (UniqueViolation), as INSERT does."""
    with conn.cursor().copy(_COPY_ITEMS) as copy:
        copy.set_types(list(_TYPES))
        for row in zip(*columns, strict=True):
            values = list(row)
            values[_METADATA] = json.loads(values[_METADATA])  # the jsonb dumper encodes it
            copy.write_row(values)
    return [(int(r[0]), r[1], r[2]) for r in conn.execute(_WRITTEN, [columns[0]]).fetchall()]


def copy_vectors(conn: Connection[Any], rowids: Sequence[int], vectors: Sequence[Vector]) -> None:
    """COPY vectors of rows that have none yet."""
    with conn.cursor().copy(_COPY_VECTORS) as copy:
        copy.set_types(["int8", "vector"])
        for rowid, vec in zip(rowids, vectors, strict=True):
            copy.write_row((rowid, vec))


def rebuild_hnsw_for(conn: Connection[Any], batch: int) -> bool:
    """Whether a batch of `batch` vectors should drop the HNSW index (to build it again
    once written): at least HNSW_REBUILD_MIN of them, and at least as many as are stored."""
    if batch < HNSW_REBUILD_MIN:
        return False
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'item_vectors'::regclass").fetchone()
    stored = float(row[0]) if row else 0.0
    if stored < 0:  # never analyzed: count
        counted = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
        stored = float(counted[0]) if counted else 0.0
    return batch >= stored
