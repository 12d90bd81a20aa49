"""records.VectorTables inside one PostgreSQL write transaction (the re-embed steps)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection


class VectorTables:
    """records.VectorTables inside one PostgreSQL write transaction."""

    def __init__(self, conn: Connection[Any]) -> None:
        self.conn = conn

    def meta(self, keys: Sequence[str]) -> dict[str, str]:
        return dict(self.conn.execute(
            "SELECT key, value FROM meta WHERE key = ANY(%s)", [list(keys)]).fetchall())

    def set_meta(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.conn.cursor().executemany(q.SET_META, list(pairs))

    def delete_meta(self, keys: Sequence[str]) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = ANY(%s)", [list(keys)])

    def create_vector_table(self, dim: int) -> None:
        self.conn.execute(q.create_vector_table(dim))

    def replace_vector_table(self, dim: int) -> None:
        self.conn.execute("DROP TABLE IF EXISTS item_vectors")
        self.conn.execute(q.create_vector_table(dim))

    def has_pending_table(self) -> bool:
        row = self.conn.execute("SELECT to_regclass('item_vectors_pending') IS NOT NULL").fetchone()
        return row == (True,)

    def create_pending_table(self, dim: int) -> None:
        self.conn.execute(q.create_pending_table(dim))

    def drop_pending_table(self) -> None:
        self.conn.execute("DROP TABLE IF EXISTS item_vectors_pending")

    def move_pending_vectors(self) -> int:
        moved = self.conn.execute(q.MOVE_PENDING).rowcount
        self.conn.execute(q.UNMARK_NOT_PENDING)
        self.conn.execute(q.MARK_PENDING)
        return int(moved)
