"""The embedded backend: one SQLite file, FTS5 for BM25, sqlite-vec for vectors.

Items, their FTS5 rows (kept in sync by triggers) and their vectors (a `vec0`
table) are written in one transaction. Vector search runs over an exact
in-memory matrix rebuilt from the `vec0` table (see vector_index.py).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import (
    BackendUnavailableError,
    DimensionMismatchError,
    InvalidInputError,
    StoreError,
)
from ...model import Filters, Item
from ...textquery import TextQuery
from .. import codec, migrations
from ..contract import Scope, ScoredIds, Vector
from . import driver as sqlite_driver
from .vector_index import VectorIndex

BUSY_TIMEOUT_S = 30.0
# FTS5 bm25() column weights (title, text). Chosen by the evaluation harness.
DEFAULT_BM25_WEIGHTS = (2.0, 1.0)
_MAX_VARS = 500  # stay under SQLITE_MAX_VARIABLE_NUMBER on old builds
# text_search fetches this many best-scored FTS rows per wanted row (divided by the
# corpus's share of the store) before filtering them; past the cap it filters in SQL.
_FTS_OVERFETCH = 4
_FTS_OVERFETCH_MAX = 4000

_ITEM_COLUMNS = (
    "id, corpus, title, text, kind, scope, repo, namespace, source_url, metadata, created_at, "
    "updated_at, expires_at, access_count, last_accessed_at, stale"
)


_CREATE_PENDING = (
    "CREATE TABLE IF NOT EXISTS vec_items_pending "
    "(id TEXT PRIMARY KEY, embedding BLOB NOT NULL, content_hash TEXT NOT NULL)"
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
        self._writes = 0  # bumped around every write transaction: read caches key on it
        self._corpora: tuple[tuple[int, int], dict[str, int]] | None = None
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
            self._writes += 1
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
            finally:
                self._writes += 1

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, params).fetchall())
            except self._database_error as exc:  # locked too long, corrupt, I/O error
                raise StoreError(f"query failed: {exc}") from exc
            except (UnicodeEncodeError, OverflowError) as exc:  # a value SQLite cannot bind
                raise InvalidInputError(f"a value cannot be used in a query: {exc}") from exc

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
        if self.vector_dim() == dim:
            return
        with self._write() as conn:  # checked again under the write lock: others may race us
            row = conn.execute("SELECT value FROM meta WHERE key = 'vector_dim'").fetchone()
            if row is not None and int(row[0]) == dim:
                return
            if row is not None:
                raise DimensionMismatchError(f"store holds {row[0]}-dimensional vectors, not {dim}")
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

    # -- switching models: new vectors beside the old ones, swapped in at the end ---------------

    def begin_reembed(self, model_id: str, dim: int) -> None:
        """Start (or resume, for the same model and dimension) filling the pending vectors."""
        with self._write() as conn:
            rows = conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('pending_embedder', 'pending_vector_dim')"
            ).fetchall()
            pending = dict(rows)
            if pending == {"pending_embedder": model_id, "pending_vector_dim": str(int(dim))}:
                conn.execute(_CREATE_PENDING)
                return
            conn.execute("DROP TABLE IF EXISTS vec_items_pending")
            conn.execute(_CREATE_PENDING)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("pending_embedder", model_id), ("pending_vector_dim", str(int(dim)))])

    def pending_missing_ids(self, after: str, limit: int) -> list[str]:
        """Ids (> `after`, in id order) without a pending vector for their current text."""
        return [r[0] for r in self._read(
            "SELECT i.id FROM items i LEFT JOIN vec_items_pending p ON p.id = i.id "
            "WHERE i.id > ? AND (p.id IS NULL OR p.content_hash != i.content_hash) "
            "ORDER BY i.id LIMIT ?", (after, limit))]

    def write_pending_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> None:
        dim = self.get_meta("pending_vector_dim")
        if dim is None:
            raise StoreError("no re-embedding is in progress")
        rows = []
        for item_id, vec, chash in zip(ids, vectors, content_hashes, strict=True):
            codec.check_dim(vec, int(dim), label=f"item {item_id!r}: vector", holder="the new model has")
            rows.append((item_id, codec.to_blob(vec), chash))
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO vec_items_pending (id, embedding, content_hash) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, "
                "content_hash = excluded.content_hash", rows)

    def finish_reembed(self, model_id: str, dim: int) -> int:
        """In one transaction: pending vectors replace the old ones, the store records the new model.

        Items whose text changed since their pending vector was computed (or that
        arrived meanwhile) are left without a vector, for `ids_missing_vectors`.
        Returns how many vectors were swapped in.
        """
        with self._write() as conn:
            pending = dict(conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('pending_embedder', 'pending_vector_dim')"
            ).fetchall())
            if pending != {"pending_embedder": model_id, "pending_vector_dim": str(int(dim))}:
                raise StoreError(f"no re-embedding to {model_id!r} is in progress")
            conn.execute("DROP TABLE IF EXISTS vec_items")
            conn.execute(
                f"CREATE VIRTUAL TABLE vec_items USING vec0 "
                f"(embedding float[{int(dim)}] distance_metric=cosine)")
            moved = conn.execute(
                "INSERT INTO vec_items (rowid, embedding) SELECT i.rowid, p.embedding "
                "FROM vec_items_pending p JOIN items i "
                "ON i.id = p.id AND i.content_hash = p.content_hash").rowcount
            conn.execute(
                "UPDATE items SET embedded_hash = CASE WHEN EXISTS (SELECT 1 FROM vec_items_pending p "
                "WHERE p.id = items.id AND p.content_hash = items.content_hash) "
                "THEN content_hash ELSE NULL END")
            conn.execute("DROP TABLE vec_items_pending")
            conn.execute("DELETE FROM meta WHERE key IN ('pending_embedder', 'pending_vector_dim')")
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("embedder", model_id), ("vector_dim", str(int(dim)))])
        self._index = None
        return int(moved)

    def cancel_reembed(self) -> None:
        """Forget an unfinished re-embedding (its pending vectors are dropped)."""
        with self._write() as conn:
            conn.execute("DROP TABLE IF EXISTS vec_items_pending")
            conn.execute("DELETE FROM meta WHERE key IN ('pending_embedder', 'pending_vector_dim')")

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
                        codec.check_dim(vec, dim, label=f"item {item.id!r}: vector")
                        conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                        conn.execute("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                                     (rowid, codec.to_blob(vec)))
                    elif kept_hash is None and dim is not None:
                        conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                        stale_vectors.append(rowid)
                    written.append((rowid, item, vec))
        except self._database_error as exc:
            if "UNIQUE constraint failed: items.id" in str(exc):
                raise InvalidInputError(f"an item with this id already exists: {exc}") from exc
            raise StoreError(f"write failed: {exc}") from exc
        except (UnicodeEncodeError, OverflowError) as exc:
            raise InvalidInputError(f"a value cannot be stored: {exc}") from exc
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

    def write_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> int:
        """Store vectors for items whose text still has the given hash; returns how many.

        Only the vector and `embedded_hash` change, so an item rewritten by another
        writer meanwhile is neither overwritten nor given a vector of its old text.
        """
        dim = self.vector_dim()
        codec.check_dims(zip(ids, vectors, strict=True), dim)
        written: list[tuple[int, Item, Vector | None]] = []
        with self._write() as conn:
            for item_id, vec, chash in zip(ids, vectors, content_hashes, strict=True):
                row = conn.execute(
                    "UPDATE items SET embedded_hash = ? WHERE id = ? AND content_hash = ? "
                    "RETURNING rowid, corpus, expires_at, stale", (chash, item_id, chash)).fetchone()
                if row is None:
                    continue
                rowid = row[0]
                conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                conn.execute("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                             (rowid, codec.to_blob(vec)))
                written.append((rowid, Item(text="", id=item_id, corpus=row[1], expires_at=row[2],
                                            stale=bool(row[3])), vec))
        self._after_write(written, [])
        return len(written)

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
        # Every search asks (to resolve its corpora); counting scans an index of every item,
        # so the answer is kept until this connection writes or another one commits.
        with self._lock:
            key = (self._data_version(), self._writes)
            if self._corpora is None or self._corpora[0] != key:
                self._corpora = (key, dict(self._read(
                    "SELECT corpus, count(*) FROM items GROUP BY corpus ORDER BY corpus")))
            return dict(self._corpora[1])

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
                out[item_id] = codec.from_blob(blob)
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
        bm25 = f"bm25(items_fts, {float(wt)!r}, {float(wx)!r})"
        if not scope.filters.needs_row_filter:
            found = self._text_search_best_first(match, bm25, scope, limit)
            if found is not None:
                return found
        sql = (
            f"SELECT i.id, {bm25} AS s "
            f"FROM items_fts JOIN items i ON i.rowid = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND {where} ORDER BY s, i.id LIMIT ?"
        )
        rows = self._read(sql, [match, *params, limit])
        return [(r[0], -float(r[1])) for r in rows]

    def _text_search_best_first(
        self, match: str, bm25: str, scope: Scope, limit: int,
    ) -> ScoredIds | None:
        """The joined query's answer from the best-scored FTS rows alone, or None.

        FTS5 scores every matching row either way; joining each one to its item (to
        filter it and read its id) is what costs, several times the scoring. So take the
        best `fetch` rows by score, filter just those, and keep the ones scoring strictly
        better than the last fetched row: every matching row scoring better than that is
        among them. When at least `limit` survive, they are exactly the joined query's
        first rows (same order: score, then id); otherwise the caller runs that query.
        """
        counts = self.corpora()
        share = counts.get(scope.corpus, 0) / max(1, sum(counts.values()))
        if share <= 0:
            return None
        fetch = math.ceil(_FTS_OVERFETCH * limit / share)
        if fetch > _FTS_OVERFETCH_MAX:
            return None  # the corpus is a small share of the store: filter inside the query
        rows = self._read(
            f"SELECT rowid, {bm25} AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s LIMIT ?",
            [match, fetch])
        complete = len(rows) < fetch  # every matching row was fetched
        if not complete:
            worst = rows[-1][1]
            rows = [r for r in rows if r[1] < worst]
        where, params = filter_sql(scope)
        ids: dict[int, str] = {}
        for chunk in _chunks([r[0] for r in rows]):
            ids.update(self._read(
                f"SELECT i.rowid, i.id FROM items i WHERE i.rowid IN ({_marks(len(chunk))}) "
                f"AND {where}", [*chunk, *params]))
        best = sorted((s, ids[rowid]) for rowid, s in rows if rowid in ids)
        if len(best) < limit and not complete:
            return None
        return [(item_id, -float(s)) for s, item_id in best[:limit]]

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
        query = codec.query(vector, dim)
        if query is None:
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
            rowids: list[int] = []
            blocks: list[Vector] = []
            corpora: list[str] = []
            expires: list[float | None] = []
            stale: list[bool] = []
            while batch := cursor.fetchmany(4096):
                rowids.extend(r[0] for r in batch)
                blocks.append(codec.matrix_from_blobs([r[1] for r in batch], dim))
                corpora.extend(r[2] for r in batch)
                expires.extend(r[3] for r in batch)
                stale.extend(bool(r[4]) for r in batch)
            matrix = np.concatenate(blocks) if blocks else codec.matrix_from_blobs([], dim)
            index.load(rowids, matrix, corpora, expires, stale)
            self._index, self._index_version = index, version
            return index

    # -- maintenance ----------------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """SQLite's and FTS5's integrity checks, and items / FTS rows / vectors agreeing by rowid.

        An empty list means the store is sound. The FTS index is compared through its
        `docsize` shadow table: a scan of an external-content FTS5 table reads the
        content table, so counting it proves nothing.
        """
        problems = [f"sqlite: {r[0]}" for r in self._read("PRAGMA integrity_check") if r[0] != "ok"]
        try:
            self._read("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
        except StoreError as exc:
            problems.append(f"fts integrity-check: {exc}")
        checks = [
            ("FTS rows without an item",
             "SELECT count(*) FROM items_fts_docsize WHERE id NOT IN (SELECT rowid FROM items)"),
            ("items without an FTS row",
             "SELECT count(*) FROM items WHERE rowid NOT IN (SELECT id FROM items_fts_docsize)"),
        ]
        if self.vector_dim() is not None:
            checks += [
                ("vectors without an item",
                 "SELECT count(*) FROM vec_items WHERE rowid NOT IN (SELECT rowid FROM items)"),
                ("items marked embedded without a vector",
                 "SELECT count(*) FROM items WHERE embedded_hash IS NOT NULL "
                 "AND rowid NOT IN (SELECT rowid FROM vec_items)"),
                ("vectors of items not marked embedded",
                 "SELECT count(*) FROM items WHERE embedded_hash IS NULL "
                 "AND rowid IN (SELECT rowid FROM vec_items)"),
            ]
        for label, sql in checks:
            try:
                n = int(self._read(sql)[0][0])
            except StoreError as exc:
                problems.append(f"{label}: {exc}")
                continue
            if n:
                problems.append(f"{n} {label}")
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


