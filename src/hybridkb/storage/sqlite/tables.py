"""The tables a store's write transaction changes when vectors are set up or swapped
(records.VectorTables for SQLite), and the SQL text and batching the SQLite modules share."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import codec, records, textcodec

SET_META = records.set_meta_sql("?")
CREATE_PENDING = (
    "CREATE TABLE IF NOT EXISTS vec_items_pending "
    "(id TEXT PRIMARY KEY, embedding BLOB NOT NULL, content_hash TEXT NOT NULL)"
)
MAX_VARS = 500  # bound parameters per statement: under SQLITE_MAX_VARIABLE_NUMBER on old builds


def hash_blob(content_hash: str) -> bytes:
    """A content hash (embedding.content_hash: 32 hex digits) as SQLite keeps it since
    migration 014: its 16 bytes, half the text's (1M items: 32 MB of the items table)."""
    return bytes.fromhex(content_hash)


def hash_text(value: Any) -> str:
    """A stored content hash as the hex text the rest of the code compares."""
    return value.hex() if isinstance(value, bytes) else str(value)


def marks(n: int) -> str:
    return ",".join("?" * n)


def chunks(seq: Sequence[Any], size: int = MAX_VARS) -> Iterator[Sequence[Any]]:
    """`seq` in slices small enough to bind as one statement's parameters."""
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def create_vectors(dim: int, name: str = "vec_items", length: int | None = None) -> str:
    """The vector table: each vector's bytes (codec.to_stored_blob: a scale and int8 codes
    since migration 013, float16 from 011, float32 before) by its item's rowid, their length
    checked (`length`: the stored layout's by default; until migration 009 a sqlite-vec
    `vec0` table)."""
    size = codec.stored_bytes(dim) if length is None else int(length)
    return (f"CREATE TABLE {name} (rowid INTEGER PRIMARY KEY, "
            f"embedding BLOB NOT NULL CHECK (length(embedding) = {size}))")


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
    dim = int(declared.group(1))
    conn.execute(create_vectors(dim, "vec_items_moved", length=4 * dim))
    conn.execute("INSERT INTO vec_items_moved (rowid, embedding) "
                 "SELECT rowid, embedding FROM vec_items ORDER BY rowid")
    conn.execute("DROP TABLE vec_items")
    conn.execute("ALTER TABLE vec_items_moved RENAME TO vec_items")
    return True


def half_vectors(conn: Any, batch: int = 20_000) -> bool:
    """Migration 011, inside the caller's transaction: a vector table of float32 blobs becomes
    one of float16 blobs with the same rowids, and vectors waiting in a re-embedding's
    pending table are converted too (migration 013 then makes them the stored layout).
    Returns whether there was one to move."""
    return _convert_vectors(conn, 4, 2, lambda blobs: [codec.half_from_f32_blob(b) for b in blobs], batch)


def int8_vectors(conn: Any, batch: int = 20_000) -> bool:
    """Migration 013, inside the caller's transaction: a vector table of float16 blobs
    becomes one of the stored layout (codec.to_stored_blob: a scale and int8 codes, about
    half the bytes) with the same rowids; a re-embedding's pending vectors too. A vector
    base built from the float16 values holds the same codes and only orders rows (the exact
    pass reads this table): it stays. Returns whether there was one to move; when so,
    `optimize` VACUUMs the file."""
    moved = _convert_vectors(conn, 2, None, codec.stored_from_half_blobs, batch)
    if moved:
        conn.execute(SET_META, ("vacuum_due", "1"))
    return moved


def _convert_vectors(conn: Any, width: int, new_width: int | None,
                     convert: Callable[[list[bytes]], list[bytes]], batch: int) -> bool:
    """The vector table (and pending vectors) rewritten from blobs of `width` bytes a
    component to `convert`'s (`new_width` bytes a component; None: the stored layout),
    when the table's checked length and the store's dimension say it holds the old ones."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'vec_items'").fetchone()
    checked = _CHECKED.search(str(row[0])) if row is not None else None
    dim = _dimension(conn)
    if dim is None and checked is not None and int(checked.group(1)) % width == 0:
        dim = int(checked.group(1)) // width  # the table's own length says it (older stores)
    old = checked is not None and dim is not None and int(checked.group(1)) == width * dim
    if old and dim is not None:
        conn.execute(create_vectors(dim, "vec_items_new",
                                    None if new_width is None else new_width * dim))
        last = 0
        while rows := conn.execute("SELECT rowid, embedding FROM vec_items WHERE rowid > ? "
                                   "ORDER BY rowid LIMIT ?", (last, batch)).fetchall():
            conn.executemany("INSERT INTO vec_items_new (rowid, embedding) VALUES (?, ?)",
                             zip([r for r, _ in rows], convert([b for _, b in rows]), strict=True))
            last = int(rows[-1][0])
        conn.execute("DROP TABLE vec_items")
        conn.execute("ALTER TABLE vec_items_new RENAME TO vec_items")
    pending = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vec_items_pending'").fetchone()
    if pending is not None:
        rows = conn.execute("SELECT id, embedding FROM vec_items_pending").fetchall()
        conn.executemany("UPDATE vec_items_pending SET embedding = ? WHERE id = ?",
                         zip(convert([b for _, b in rows]), [i for i, _ in rows], strict=True))
    return old


def _dimension(conn: Any) -> int | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (records.META_VECTOR_DIM,)).fetchone()
    return int(row[0]) if row is not None and str(row[0]).isdigit() else None


def binary_hashes(conn: Any, batch: int = 20_000) -> int:
    """Migration 014, inside the caller's transaction: the items' `content_hash` and
    `embedded_hash` (and a re-embedding's pending hashes) from hex text to their bytes
    (hash_blob). The change log's vector trigger is held off meanwhile (no vector changes):
    it is dropped and made again from its own SQL. Returns how many rows changed; when
    any, `optimize` VACUUMs the file (the rows shrank in place)."""
    changed, last = 0, 0
    with _trigger_held_off(conn, "items_log_vector"):
        while rows := conn.execute(
                "SELECT rowid, content_hash, embedded_hash FROM items WHERE rowid > ? "
                "ORDER BY rowid LIMIT ?", (last, batch)).fetchall():
            updates = [(_unhexed(c), _unhexed(e), r) for r, c, e in rows
                       if isinstance(c, str) or isinstance(e, str)]
            conn.executemany("UPDATE items SET content_hash = ?, embedded_hash = ? WHERE rowid = ?",
                             updates)
            changed += len(updates)
            last = int(rows[-1][0])
    pending = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vec_items_pending'").fetchone()
    if pending is not None:
        conn.executemany("UPDATE vec_items_pending SET content_hash = ? WHERE id = ?",
                         [(_unhexed(h), i) for i, h in
                          conn.execute("SELECT id, content_hash FROM vec_items_pending").fetchall()])
    if changed:
        conn.execute(SET_META, ("vacuum_due", "1"))
    return changed


@contextmanager
def _trigger_held_off(conn: Any, name: str) -> Iterator[None]:
    """Inside a migration's transaction: the change-log trigger `name` dropped while rows
    are rewritten in a way it must not log, then made again from its own SQL (an error
    rolls the whole transaction back, trigger included)."""
    trigger = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,)).fetchone()
    if trigger is not None:
        conn.execute(f"DROP TRIGGER {name}")
    yield
    if trigger is not None:
        conn.execute(str(trigger[0]))


def _unhexed(value: Any) -> Any:
    """A hex hash as its bytes; anything else (NULL, already bytes, not hex) as it is."""
    if not isinstance(value, str):
        return value
    try:
        return bytes.fromhex(value)
    except ValueError:
        return value


def pack_texts(conn: Any, batch: int = 5_000) -> int:
    """Migration 012, inside the caller's transaction: every plain text long enough to pack
    (textcodec.pack) is stored packed. The change log's update trigger is held off meanwhile
    (the text is the same): it is dropped and made again from its own SQL. Returns how many
    texts were packed; when any, `hybridkb optimize` will VACUUM the file (their pages stay
    half empty until then)."""
    packed, last = 0, 0
    with _trigger_held_off(conn, "items_log_update"):
        while rows := conn.execute(
                "SELECT rowid, text FROM items WHERE rowid > ? AND typeof(text) = 'text' "
                "AND length(text) >= ? ORDER BY rowid LIMIT ?",
                (last, textcodec.PLAIN_CHARS, batch)).fetchall():
            changed = [(value, rowid) for (rowid, _), value
                       in zip(rows, _packed([r[1] for r in rows]), strict=True)
                       if isinstance(value, bytes)]
            conn.executemany("UPDATE items SET text = ? WHERE rowid = ?", changed)
            packed += len(changed)
            last = int(rows[-1][0])
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
