"""The tables a store's write transaction changes when vectors are set up or swapped
(records.VectorTables for SQLite), and the SQL text and batching the SQLite modules share."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from .. import codec, records, textcodec

SET_META = records.set_meta_sql("?")
CREATE_PENDING = (
    "CREATE TABLE IF NOT EXISTS vec_items_pending "
    "(id TEXT PRIMARY KEY, embedding BLOB NOT NULL, content_hash TEXT NOT NULL)"
)
MAX_VARS = 500  # bound parameters per statement: under SQLITE_MAX_VARIABLE_NUMBER on old builds


def marks(n: int) -> str:
    return ",".join("?" * n)


def chunks(seq: Sequence[Any], size: int = MAX_VARS) -> Iterator[Sequence[Any]]:
    """`seq` in slices small enough to bind as one statement's parameters."""
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def create_vectors(dim: int, name: str = "vec_items", width: int = codec.STORED_BYTES) -> str:
    """The vector table: each vector's bytes (codec.to_stored_blob: float16 since migration
    011, float32 before) by its item's rowid, their length checked (until migration 009 a
    sqlite-vec `vec0` table)."""
    return (f"CREATE TABLE {name} (rowid INTEGER PRIMARY KEY, "
            f"embedding BLOB NOT NULL CHECK (length(embedding) = {int(width) * int(dim)}))")


_VEC0_DIM = re.compile(r"float\[(\d+)\]")  # the size a vec0 table was declared with
_CHECKED = re.compile(r"length\(embedding\) = (\d+)")  # the byte length a vector table checks


def plain_vectors(conn: Any) -> bool:
    """Migration 009, inside the caller's transaction: a `vec0` vector table becomes a plain
    one with the same rowids and bytes. Returns whether there was one to move."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'vec_items'").fetchone()
    sql = str(row[0]) if row is not None else ""
    declared = _VEC0_DIM.search(sql)
    if not sql.upper().startswith("CREATE VIRTUAL TABLE") or declared is None:
        return False
    conn.execute(create_vectors(int(declared.group(1)), "vec_items_moved", width=4))
    conn.execute("INSERT INTO vec_items_moved (rowid, embedding) "
                 "SELECT rowid, embedding FROM vec_items ORDER BY rowid")
    conn.execute("DROP TABLE vec_items")
    conn.execute("ALTER TABLE vec_items_moved RENAME TO vec_items")
    return True


def half_vectors(conn: Any, batch: int = 20_000) -> bool:
    """Migration 011, inside the caller's transaction: a vector table of float32 blobs becomes
    one of float16 blobs (codec.to_stored_blob) with the same rowids, and vectors waiting in a
    re-embedding's pending table are converted too. Returns whether there was one to move."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'vec_items'").fetchone()
    checked = _CHECKED.search(str(row[0])) if row is not None else None
    if checked is not None and int(checked.group(1)) % 4 == 0:
        dim = int(checked.group(1)) // 4
        conn.execute(create_vectors(dim, "vec_items_half"))
        last = 0
        while rows := conn.execute("SELECT rowid, embedding FROM vec_items WHERE rowid > ? "
                                   "ORDER BY rowid LIMIT ?", (last, batch)).fetchall():
            conn.executemany("INSERT INTO vec_items_half (rowid, embedding) VALUES (?, ?)",
                             [(r, codec.stored_from_f32_blob(b)) for r, b in rows])
            last = int(rows[-1][0])
        conn.execute("DROP TABLE vec_items")
        conn.execute("ALTER TABLE vec_items_half RENAME TO vec_items")
    pending = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vec_items_pending'").fetchone()
    if pending is not None:
        rows = conn.execute("SELECT id, embedding FROM vec_items_pending").fetchall()
        conn.executemany("UPDATE vec_items_pending SET embedding = ? WHERE id = ?",
                         [(codec.stored_from_f32_blob(b), i) for i, b in rows])
    return checked is not None


def pack_texts(conn: Any, batch: int = 5_000) -> int:
    """Migration 012, inside the caller's transaction: every plain text long enough to pack
    (textcodec.pack) is stored packed. The change log's update trigger is held off meanwhile
    (the text is the same): it is dropped and made again from its own SQL. Returns how many
    texts were packed; when any, `hybridkb optimize` will VACUUM the file (their pages stay
    half empty until then)."""
    trigger = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'items_log_update'").fetchone()
    if trigger is not None:
        conn.execute("DROP TRIGGER items_log_update")
    packed, last = 0, 0
    while rows := conn.execute(
            "SELECT rowid, text FROM items WHERE rowid > ? AND typeof(text) = 'text' "
            "AND length(text) >= ? ORDER BY rowid LIMIT ?",
            (last, textcodec.PLAIN_CHARS, batch)).fetchall():
        changed = [(value, rowid) for (rowid, _), value in zip(rows, _packed([r[1] for r in rows]),
                                                               strict=True) if isinstance(value, bytes)]
        conn.executemany("UPDATE items SET text = ? WHERE rowid = ?", changed)
        packed += len(changed)
        last = int(rows[-1][0])
    if trigger is not None:
        conn.execute(str(trigger[0]))
    if packed:  # the rows shrank in place: `optimize` writes the file anew (maintenance.reclaim)
        conn.execute(SET_META, ("vacuum_due", "1"))
    return packed


def _packed(texts: list[str]) -> list[str | bytes]:
    try:
        return textcodec.pack_many(texts)
    except UnicodeEncodeError:  # SQLite kept what Python cannot encode: that one stays plain
        return [_packed_alone(text) for text in texts]


def _packed_alone(text: str) -> str | bytes:
    try:
        return textcodec.pack(text)
    except UnicodeEncodeError:
        return text


class Tables:
    """records.VectorTables inside one SQLite write transaction."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def meta(self, keys: Sequence[str]) -> dict[str, str]:
        return dict(self.conn.execute(
            f"SELECT key, value FROM meta WHERE key IN ({marks(len(keys))})", list(keys)).fetchall())

    def set_meta(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.conn.executemany(SET_META, pairs)

    def delete_meta(self, keys: Sequence[str]) -> None:
        self.conn.execute(f"DELETE FROM meta WHERE key IN ({marks(len(keys))})", list(keys))

    def create_vector_table(self, dim: int) -> None:
        self.conn.execute(create_vectors(dim))

    def replace_vector_table(self, dim: int) -> None:
        self.conn.execute("DROP TABLE IF EXISTS vec_items")
        self.conn.execute(create_vectors(dim))

    def has_pending_table(self) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vec_items_pending'"
        ).fetchone() is not None

    def create_pending_table(self, dim: int) -> None:
        self.conn.execute(CREATE_PENDING)  # blobs: the dimension is checked on write

    def drop_pending_table(self) -> None:
        self.conn.execute("DROP TABLE IF EXISTS vec_items_pending")

    def move_pending_vectors(self) -> int:
        moved = self.conn.execute(
            "INSERT INTO vec_items (rowid, embedding) SELECT i.rowid, p.embedding "
            "FROM vec_items_pending p JOIN items i "
            "ON i.id = p.id AND i.content_hash = p.content_hash").rowcount
        self.conn.execute(
            "UPDATE items SET embedded_hash = CASE WHEN EXISTS (SELECT 1 FROM vec_items_pending p "
            "WHERE p.id = items.id AND p.content_hash = items.content_hash) "
            "THEN content_hash ELSE NULL END")
        return int(moved)
