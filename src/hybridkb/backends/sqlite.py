"""The embedded backend: one SQLite file, FTS5 for BM25, sqlite-vec for vectors.

Items, their FTS5 rows (kept in sync by triggers) and their vectors (a `vec0`
table) are written in one transaction. Vector search runs over an exact
in-memory matrix rebuilt from the `vec0` table (see vector_index.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import (
    BackendUnavailableError,
    DimensionMismatchError,
    InvalidInputError,
    StoreError,
)
from ..model import Filters, Item
from ..textquery import TextQuery
from . import migrations, sqlite_driver
from .base import Scope, ScoredIds, Vector
from .vector_index import VectorIndex

BUSY_TIMEOUT_S = 30.0
# FTS5 bm25() column weights (title, text). Chosen by the evaluation harness.
DEFAULT_BM25_WEIGHTS = (1.0, 1.0)
_MAX_VARS = 500  # stay under SQLITE_MAX_VARIABLE_NUMBER on old builds

_ITEM_COLUMNS = (
    "id, corpus, title, text, kind, scope, repo, namespace, source_url, metadata, created_at, "
    "updated_at, expires_at, access_count, last_accessed_at, stale"
)


def _chunks(seq: Sequence[Any], size: int = _MAX_VARS) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _row_to_item(row: Sequence[Any]) -> Item:
    return Item(
        id=row[0], corpus=row[1], title=row[2], text=row[3], kind=row[4], scope=row[5],
        repo=row[6], namespace=row[7], source_url=row[8], metadata=json.loads(row[9] or "{}"),
        created_at=row[10], updated_at=row[11], expires_at=row[12], access_count=row[13],
        last_accessed_at=row[14], stale=bool(row[15]),
    )


def filter_sql(scope: Scope, alias: str = "i") -> tuple[str, list[Any]]:
    """WHERE conditions (joined by AND) and their bound values for a Scope."""
    f: Filters = scope.filters
    clauses = [f"{alias}.corpus = ?"]
    params: list[Any] = [scope.corpus]
    if not f.include_expired:
        clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")
        params.append(scope.now)
    if not f.include_stale:
        clauses.append(f"{alias}.stale = 0")
    for column, values in (("kind", f.kinds), ("scope", f.scope), ("repo", f.repo),
                           ("namespace", f.namespace)):
        if values:
            clauses.append(f"{alias}.{column} IN ({_marks(len(values))})")
            params.extend(values)
    for key, values in f.metadata:
        clauses.append(
            f"EXISTS (SELECT 1 FROM json_each({alias}.metadata) AS m "
            f"WHERE m.key = ? AND m.value IN ({_marks(len(values))}))"
        )
        params.append(key)
        params.extend(int(v) if isinstance(v, bool) else v for v in values)
    for column, op, value in (("created_at", ">=", f.created_after),
                              ("created_at", "<", f.created_before),
                              ("updated_at", ">=", f.updated_after),
                              ("updated_at", "<", f.updated_before)):
        if value is not None:
            clauses.append(f"{alias}.{column} {op} ?")
            params.append(value)
    return " AND ".join(clauses), params


class SQLiteBackend:
    """One SQLite file (or ":memory:"). Thread-safe through one lock per store."""

    def __init__(self, path: str | Path, *, bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS,
                 cache_mb: int = 64) -> None:
        self.path = str(path)
        self.url = self.path
        self.bm25_weights = bm25_weights
        if self.path != ":memory:":
            parent = Path(self.path).expanduser().resolve().parent
            if not parent.is_dir():
                raise StoreError(f"cannot create store {self.path!r}: folder {parent} does not exist")
        self._operational_error, self._database_error = sqlite_driver.errors()
        self._lock = threading.RLock()
        try:
            self._conn = sqlite_driver.connect(self.path, timeout=BUSY_TIMEOUT_S)
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(f"PRAGMA cache_size = {-1024 * int(cache_mb)}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except self._database_error as exc:
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        self._index: VectorIndex | None = None
        self._index_version: int | None = None

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One IMMEDIATE transaction: the write lock is taken up front, so no deadlock."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except self._operational_error as exc:
                raise StoreError(f"store is busy or read-only: {exc}") from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except self._database_error as exc:
                    self._conn.execute("ROLLBACK")
                    raise StoreError(f"commit failed: {exc}") from exc

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, params).fetchall())
            except self._operational_error as exc:
                raise StoreError(f"query failed: {exc}") from exc

    def _migrate(self) -> None:
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(name TEXT PRIMARY KEY, applied_at REAL NOT NULL DEFAULT (unixepoch('subsec')))"
            )
            done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
            for name, sql in migrations.load("sqlite"):
                if name in done:
                    continue
                for statement in _split_sql(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- metadata -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value)
            )

    def vector_dim(self) -> int | None:
        value = self.get_meta("vector_dim")
        return int(value) if value else None

    def ensure_vector_storage(self, dim: int) -> None:
        current = self.vector_dim()
        if current == dim:
            return
        if current is not None:
            raise DimensionMismatchError(f"store holds {current}-dimensional vectors, not {dim}")
        with self._write() as conn:
            conn.execute(
                f"CREATE VIRTUAL TABLE vec_items USING vec0 "
                f"(embedding float[{int(dim)}] distance_metric=cosine)"
            )
            conn.execute("INSERT INTO meta (key, value) VALUES ('vector_dim', ?)", (str(dim),))

    def clear_vectors(self) -> None:
        """Drop every vector (before re-embedding with a model of another dimension)."""
        with self._write() as conn:
            conn.execute("DROP TABLE IF EXISTS vec_items")
            conn.execute("DELETE FROM meta WHERE key = 'vector_dim'")
            conn.execute("UPDATE items SET embedded_hash = NULL")
        self._index = None

    # -- writes ---------------------------------------------------------------------------------

    def upsert(
        self, items: Sequence[Item], vectors: Sequence[Vector | None], content_hashes: Sequence[str],
        *, replace: bool,
    ) -> None:
        dim = self.vector_dim()
        conflict = (
            "ON CONFLICT (id) DO UPDATE SET corpus = excluded.corpus, title = excluded.title, "
            "text = excluded.text, kind = excluded.kind, scope = excluded.scope, "
            "repo = excluded.repo, namespace = excluded.namespace, "
            "source_url = excluded.source_url, metadata = excluded.metadata, "
            "updated_at = excluded.updated_at, expires_at = excluded.expires_at, "
            "stale = excluded.stale, content_hash = excluded.content_hash, "
            "embedded_hash = CASE WHEN excluded.embedded_hash IS NOT NULL "
            "THEN excluded.embedded_hash WHEN items.content_hash = excluded.content_hash "
            "THEN items.embedded_hash ELSE NULL END"
        ) if replace else ""
        sql = (
            f"INSERT INTO items ({_ITEM_COLUMNS}, content_hash, embedded_hash) "
            f"VALUES ({_marks(18)}) {conflict} RETURNING rowid, embedded_hash"
        )
        written: list[tuple[int, Item, Vector | None]] = []
        stale_vectors: list[int] = []
        try:
            with self._write() as conn:
                for item, vec, chash in zip(items, vectors, content_hashes, strict=True):
                    row = conn.execute(sql, (
                        item.id, item.corpus, item.title, item.text, item.kind, item.scope,
                        item.repo, item.namespace, item.source_url,
                        json.dumps(item.metadata, ensure_ascii=False, sort_keys=True),
                        item.created_at, item.updated_at, item.expires_at, item.access_count,
                        item.last_accessed_at, int(item.stale), chash,
                        chash if vec is not None else None,
                    )).fetchone()
                    rowid, kept_hash = row
                    if vec is not None:
                        if dim is None or len(vec) != dim:
                            raise DimensionMismatchError(
                                f"item {item.id!r}: vector has {len(vec)} dimensions, store has {dim}"
                            )
                        conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                        conn.execute("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                                     (rowid, np.asarray(vec, dtype=np.float32).tobytes()))
                    elif kept_hash is None and dim is not None:
                        conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                        stale_vectors.append(rowid)
                    written.append((rowid, item, vec))
        except self._database_error as exc:
            if "UNIQUE constraint failed: items.id" in str(exc):
                raise InvalidInputError(f"an item with this id already exists: {exc}") from exc
            raise StoreError(f"write failed: {exc}") from exc
        self._after_write(written, stale_vectors)

    def _after_write(self, written: list[tuple[int, Item, Vector | None]], dropped: list[int]) -> None:
        """Apply our own committed write to the vector cache instead of rebuilding it."""
        if self._index is None:
            return
        with self._lock:
            if self._index_version != self._data_version():
                self._index = None
                return
            with_vec = [(r, i, v) for r, i, v in written if v is not None]
            if with_vec:
                self._index.upsert([r for r, _, _ in with_vec], [v for _, _, v in with_vec if v is not None],
                                   [i.corpus for _, i, _ in with_vec],
                                   [i.expires_at for _, i, _ in with_vec],
                                   [i.stale for _, i, _ in with_vec])
            for rowid, item, vec in written:
                if vec is None:
                    self._index.update_attrs(rowid, item.corpus, item.expires_at, item.stale)
            self._index.delete(dropped)

    def delete(self, ids: Sequence[str]) -> int:
        removed: list[int] = []
        with self._write() as conn:
            for chunk in _chunks(list(ids)):
                rows = conn.execute(
                    f"DELETE FROM items WHERE id IN ({_marks(len(chunk))}) RETURNING rowid", chunk
                ).fetchall()
                removed.extend(r[0] for r in rows)
            if removed and self.vector_dim() is not None:
                for chunk in _chunks(removed):
                    conn.execute(f"DELETE FROM vec_items WHERE rowid IN ({_marks(len(chunk))})", chunk)
        if self._index is not None:
            self._index.delete(removed)
        return len(removed)

    def touch(self, ids: Sequence[str], now: float) -> None:
        if not ids:
            return
        with self._write() as conn:
            for chunk in _chunks(list(ids)):
                conn.execute(
                    f"UPDATE items SET access_count = access_count + 1, last_accessed_at = ? "
                    f"WHERE id IN ({_marks(len(chunk))})", (now, *chunk)
                )

    def purge_expired(self, now: float) -> int:
        ids = [r[0] for r in self._read(
            "SELECT id FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))]
        return self.delete(ids)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, ids: Sequence[str], *, include_expired: bool, now: float) -> list[Item]:
        found: dict[str, Item] = {}
        for chunk in _chunks(list(ids)):
            sql = f"SELECT {_ITEM_COLUMNS} FROM items WHERE id IN ({_marks(len(chunk))})"
            params: list[Any] = list(chunk)
            if not include_expired:
                sql += " AND (expires_at IS NULL OR expires_at > ?)"
                params.append(now)
            for row in self._read(sql, params):
                found[row[0]] = _row_to_item(row)
        return [found[i] for i in ids if i in found]

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for chunk in _chunks(list(ids)):
            out.update(r[0] for r in self._read(
                f"SELECT id FROM items WHERE id IN ({_marks(len(chunk))})", chunk))
        return out

    def embedded_hashes(self, ids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for chunk in _chunks(list(ids)):
            out.update((r[0], r[1]) for r in self._read(
                f"SELECT id, embedded_hash FROM items WHERE embedded_hash IS NOT NULL "
                f"AND id IN ({_marks(len(chunk))})", chunk))
        return out

    def count(self, corpus: str | None = None) -> int:
        if corpus is None:
            return int(self._read("SELECT count(*) FROM items")[0][0])
        return int(self._read("SELECT count(*) FROM items WHERE corpus = ?", (corpus,))[0][0])

    def corpora(self) -> dict[str, int]:
        return dict(self._read("SELECT corpus, count(*) FROM items GROUP BY corpus ORDER BY corpus"))

    def iter_items(self, batch_size: int = 500) -> Iterator[list[Item]]:
        last = 0
        while True:
            rows = self._read(
                f"SELECT rowid, {_ITEM_COLUMNS} FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, batch_size))
            if not rows:
                return
            last = rows[-1][0]
            yield [_row_to_item(r[1:]) for r in rows]

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        if self.vector_dim() is None:
            return {}
        out: dict[str, Vector] = {}
        for chunk in _chunks(list(ids)):
            for item_id, blob in self._read(
                f"SELECT i.id, v.embedding FROM items i JOIN vec_items v ON v.rowid = i.rowid "
                f"WHERE i.id IN ({_marks(len(chunk))})", chunk):
                out[item_id] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def ids_missing_vectors(self, limit: int) -> list[str]:
        return [r[0] for r in self._read(
            "SELECT id FROM items WHERE embedded_hash IS NULL OR embedded_hash != content_hash "
            "ORDER BY rowid LIMIT ?", (limit,))]

    # -- retrieval ------------------------------------------------------------------------------

    def text_search(self, query: TextQuery, scope: Scope, limit: int) -> ScoredIds:
        match = query.fts5()
        if match is None or limit <= 0:
            return []
        where, params = filter_sql(scope)
        wt, wx = self.bm25_weights
        sql = (
            f"SELECT i.id, bm25(items_fts, {float(wt)!r}, {float(wx)!r}) AS s "
            f"FROM items_fts JOIN items i ON i.rowid = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND {where} ORDER BY s, i.id LIMIT ?"
        )
        rows = self._read(sql, [match, *params, limit])
        return [(r[0], -float(r[1])) for r in rows]

    def substring_search(self, words: Sequence[str], scope: Scope, limit: int) -> ScoredIds:
        if not words or limit <= 0:
            return []
        where, params = filter_sql(scope)
        hits = " + ".join(
            "(instr(lower(i.text), ?) > 0) + (instr(lower(coalesce(i.title, '')), ?) > 0)"
            for _ in words)
        word_params = [w for w in words for _ in (0, 1)]
        sql = (f"SELECT i.id, {hits} AS s FROM items i WHERE {where} "
               f"AND s > 0 ORDER BY s DESC, i.id LIMIT ?")
        rows = self._read(sql, [*word_params, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def vector_search(self, vector: Vector, scope: Scope, limit: int) -> ScoredIds:
        dim = self.vector_dim()
        if dim is None or limit <= 0:
            return []
        if len(vector) != dim:
            raise DimensionMismatchError(f"query vector has {len(vector)} dimensions, store has {dim}")
        query = np.asarray(vector, dtype=np.float32)
        if not np.all(np.isfinite(query)):
            return []
        index = self._vector_index(dim)
        allowed = None
        if scope.filters.needs_row_filter:
            where, params = filter_sql(scope)
            allowed = np.array([r[0] for r in self._read(
                f"SELECT i.rowid FROM items i WHERE {where}", params)], dtype=np.int64)
        f = scope.filters
        top = index.search(query, corpus=scope.corpus, now=scope.now, limit=limit,
                           include_expired=f.include_expired, include_stale=f.include_stale,
                           allowed=allowed)
        if not top:
            return []
        ids = dict(self._read(
            f"SELECT rowid, id FROM items WHERE rowid IN ({_marks(len(top))})", [r for r, _ in top]))
        return [(ids[r], s) for r, s in top if r in ids]

    def _data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _vector_index(self, dim: int) -> VectorIndex:
        """The cached matrix; rebuilt when another connection has committed since."""
        with self._lock:
            version = self._data_version()
            if self._index is not None and self._index_version == version:
                return self._index
            index = VectorIndex(dim)
            cursor = self._conn.execute(
                "SELECT v.rowid, v.embedding, i.corpus, i.expires_at, i.stale "
                "FROM vec_items v JOIN items i ON i.rowid = v.rowid")
            while batch := cursor.fetchmany(4096):
                index.upsert([r[0] for r in batch],
                             [np.frombuffer(r[1], dtype=np.float32) for r in batch],
                             [r[2] for r in batch], [r[3] for r in batch],
                             [bool(r[4]) for r in batch])
            self._index, self._index_version = index, version
            return index

    # -- maintenance ----------------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """SQLite and FTS5 integrity checks plus items / FTS / vector agreement."""
        problems = [r[0] for r in self._read("PRAGMA integrity_check") if r[0] != "ok"]
        try:
            self._read("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
        except StoreError as exc:
            problems.append(f"fts: {exc}")
        n_items = self.count()
        n_fts = self._read("SELECT count(*) FROM items_fts")[0][0]
        if n_fts != n_items:
            problems.append(f"{n_items} items but {n_fts} FTS rows")
        if self.vector_dim() is not None:
            orphans = self._read(
                "SELECT count(*) FROM vec_items WHERE rowid NOT IN (SELECT rowid FROM items)")[0][0]
            if orphans:
                problems.append(f"{orphans} vectors without an item")
            missing = self._read(
                "SELECT count(*) FROM items WHERE embedded_hash IS NOT NULL "
                "AND rowid NOT IN (SELECT rowid FROM vec_items)")[0][0]
            if missing:
                problems.append(f"{missing} items marked embedded without a vector")
        return problems


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements; trigger bodies end with END;."""
    statements: list[str] = []
    current: list[str] = []
    in_trigger = False
    for line in script.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        upper = stripped.upper()
        if upper.startswith("CREATE TRIGGER"):
            in_trigger = True
        if (in_trigger and upper == "END;") or (not in_trigger and stripped.endswith(";")):
            statements.append("\n".join(current))
            current, in_trigger = [], False
    if current:
        statements.append("\n".join(current))
    return statements


def open_sqlite(path: str | Path, **options: Any) -> SQLiteBackend:
    try:
        return SQLiteBackend(path, **options)
    except BackendUnavailableError:
        raise
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc


