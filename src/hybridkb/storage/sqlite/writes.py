"""The rows of one upsert batch and their vectors, inside the backend's write transaction.

New rows (an `add`) go in with the rowids SQLite would have given them (one past the
largest, in order), ROWS_A_STATEMENT rows in each INSERT: a statement that may abort
(the items' UNIQUE id) copies every page it changes to a statement journal first, so one
statement a row copied the same few 8 KiB pages once a row. 64 rows a statement took the
rows' CPU from 52 to 38 us an item (20,000 benchmark items, 2026-11-29). Replaced rows (an
`upsert`) go one at a time, since each one's `INSERT ... ON CONFLICT ... RETURNING` says
what the row kept (created_at, its vector's hash), which decides its vector and its
text-index document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import NotFoundError
from ...model import Item
from .. import codec, records
from ..contract import Vector
from ..indexes.text_schema import TextDoc
from ..textcodec import pack_many
from .changes import DOC_COLUMNS, doc_of_item, text_doc
from .tables import chunks, hash_blob, marks

_COLUMNS = ", ".join(records.WRITE_COLUMNS)
_ROW_MARKS = f"(?, {marks(len(records.WRITE_COLUMNS))})"
# Rows a statement; within SQLite's oldest limit of 999 parameters a statement (before 3.32).
ROWS_A_STATEMENT = 999 // (1 + len(records.WRITE_COLUMNS))
_MAX_ROWID = 2**63 - 1  # past it SQLite picks free rowids at random: rows go one at a time


def write_rows(conn: Any, items: Sequence[Item], vectors: Sequence[Vector | None],
               content_hashes: Sequence[str], *, replace: bool, dim: int | None,
               feeding: bool, prints: Sequence[int] | None = None,
               within: Sequence[str] | None = None) -> list[TextDoc]:
    """Write the item rows (`replace`: by id, keeping what records.ON_CONFLICT_REPLACE
    keeps) and their vectors (a replaced row's old one deleted; a new row has none); return
    the rows' text-index documents when `feeding` (a bulk write hands them to the index).
    `prints`: the texts' word prints, when computed already (else computed here).
    `within`: a row is replaced only where its corpus is one of these (the conflict's
    WHERE: no row comes back for another's, and NotFoundError rolls the batch back)."""
    vector_rows: list[int] = []  # the rowids of `given`
    dropped: list[int] = []
    docs: list[TextDoc] = []
    values = [records.write_values(item, hash_blob(chash), with_vector=vec is not None, print_=p,
                                   text=text)
              for item, vec, chash, p, text in zip(
                  items, vectors, content_hashes, records.given_prints(prints, len(items)),
                  pack_many([item.text for item in items]), strict=True)]
    first = None if replace else _next_rowid(conn, len(items))
    if first is not None:
        _insert_new(conn, first, values)
        rowids = list(range(first, first + len(items)))
        kept: list[str | None] = [None] * len(items)
        rows: list[Any] = [None] * len(items)
    else:
        guard = "" if within is None else f" WHERE items.corpus IN ({marks(len(within))})"
        sql = (f"INSERT INTO items ({_COLUMNS}) VALUES ({marks(len(records.WRITE_COLUMNS))}) "
               f"{records.ON_CONFLICT_REPLACE + guard if replace else ''} RETURNING embedded_hash, "
               + (DOC_COLUMNS if feeding and replace else "rowid"))
        returned = [conn.execute(sql, (*row, *(within or ()))).fetchone() for row in values]
        for item, r in zip(items, returned, strict=True):
            if r is None:
                raise NotFoundError(f"no item with id {item.id!r} to replace in corpora "
                                    f"{', '.join(within or ())}")
        kept = [r[0] for r in returned]
        rows = [r[1:] for r in returned]
        rowids = [int(r[1]) for r in returned]
    given: list[Vector] = []
    for item, vec, rowid, kept_hash, row in zip(items, vectors, rowids, kept, rows, strict=True):
        if vec is not None:
            codec.check_dim(vec, dim, label=f"item {item.id!r}: vector")
            given.append(vec)
            vector_rows.append(rowid)
        if replace and dim is not None and (vec is not None or kept_hash is None):
            dropped.append(rowid)
        if feeding:
            docs.append(text_doc(row) if replace else doc_of_item(rowid, item))
    for chunk in chunks(dropped):
        conn.execute(f"DELETE FROM vec_items WHERE rowid IN ({marks(len(chunk))})", chunk)
    if vector_rows:
        conn.executemany("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                         zip(vector_rows, codec.to_stored_blobs(given), strict=True))
    return docs


def _insert_new(conn: Any, first: int, values: Sequence[tuple[Any, ...]]) -> None:
    """New rows with rowids `first`, `first + 1`, ..., ROWS_A_STATEMENT rows an INSERT."""
    for start in range(0, len(values), ROWS_A_STATEMENT):
        part = values[start:start + ROWS_A_STATEMENT]
        params: list[Any] = []
        for rowid, row in enumerate(part, first + start):
            params.append(rowid)
            params.extend(row)
        conn.execute(f"INSERT INTO items (rowid, {_COLUMNS}) VALUES "
                     + ", ".join([_ROW_MARKS] * len(part)), params)


def _next_rowid(conn: Any, count: int) -> int | None:
    """The rowid SQLite would give the next new row, when `count` more fit after it."""
    last = conn.execute("SELECT max(rowid) FROM items").fetchone()[0]
    first = 1 if last is None else int(last) + 1
    return first if first + count - 1 <= _MAX_ROWID else None
