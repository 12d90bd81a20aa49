"""The embedded dialect: one SQLite file, FTS5 for BM25, sqlite-vec for vectors.

Items, their FTS5 rows (kept in sync by triggers) and their vectors (a `vec0`
table) are written in one transaction. Vector search runs over an exact
in-memory matrix rebuilt from the `vec0` table (see vector_index.py). What both
dialects do alike (columns, conflict rule, filters, re-embed steps) is in records.py.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, InvalidInputError, StoreError
from ...model import Item, StoredItem
from ...textquery import TextQuery
from .. import codec, records
from ..contract import ScoredIds, SearchArea, Vector
from ..records import DEFAULT_BM25_WEIGHTS, META_PENDING_VECTOR_DIM, META_VECTOR_DIM
from . import driver as sqlite_driver
from . import maintenance
from .vector_index import VectorIndex

__all__ = ["BUSY_TIMEOUT_S", "DEFAULT_BM25_WEIGHTS", "SQLiteBackend", "filter_sql", "open_sqlite"]

BUSY_TIMEOUT_S = 30.0
_MAX_VARS = 500  # stay under SQLITE_MAX_VARIABLE_NUMBER on old builds
# text_search fetches this many best-scored FTS rows per wanted row (divided by the
# searched corpora's share of the store) before filtering them; past the cap it filters in SQL.
_FTS_OVERFETCH = 4
_FTS_OVERFETCH_MAX = 4000

_ITEM_COLUMNS = ", ".join(records.ITEM_COLUMNS)
_SET_META = records.set_meta_sql("?")
_CREATE_PENDING = (
    "CREATE TABLE IF NOT EXISTS vec_items_pending "
    "(id TEXT PRIMARY KEY, embedding BLOB NOT NULL, content_hash TEXT NOT NULL)"
)


def _chunks(seq: Sequence[Any], size: int = _MAX_VARS) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _create_vectors(dim: int) -> str:
    return f"CREATE VIRTUAL TABLE vec_items USING vec0 (embedding float[{int(dim)}] distance_metric=cosine)"


def _metadata_in(alias: str, key: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    # json_each reads JSON true/false as 1/0, so booleans are compared as integers.
    return (f"EXISTS (SELECT 1 FROM json_each({alias}.metadata) AS m "
            f"WHERE m.key = ? AND m.value IN ({_marks(len(values))}))",
            [key, *(int(v) if isinstance(v, bool) else v for v in values)])


_DIALECT = records.FilterDialect(
    mark="?",
    one_of=lambda column, values: (f"{column} IN ({_marks(len(values))})", list(values)),
    is_false=lambda column: f"{column} = 0",
    metadata_in=_metadata_in,
    # REGEXP is the Python function driver.connect registers on every connection
    path_matches=lambda alias, regex: (f"json_extract({alias}.metadata, '$.path') REGEXP ?", [regex]),
)


def filter_sql(area: SearchArea, alias: str = "i") -> tuple[str, list[Any]]:
    """WHERE conditions (joined by AND) and their bound values for a SearchArea."""
    clauses, params = records.filter_conditions(area, _DIALECT, alias)
    return (" AND ".join(clauses) or "1"), params


class _Tables:
    """records.VectorTables inside one SQLite write transaction."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def meta(self, keys: Sequence[str]) -> dict[str, str]:
        return dict(self.conn.execute(
            f"SELECT key, value FROM meta WHERE key IN ({_marks(len(keys))})", list(keys)).fetchall())

    def set_meta(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.conn.executemany(_SET_META, pairs)

    def delete_meta(self, keys: Sequence[str]) -> None:
        self.conn.execute(f"DELETE FROM meta WHERE key IN ({_marks(len(keys))})", list(keys))

    def create_vector_table(self, dim: int) -> None:
        self.conn.execute(_create_vectors(dim))

    def replace_vector_table(self, dim: int) -> None:
        self.conn.execute("DROP TABLE IF EXISTS vec_items")
        self.conn.execute(_create_vectors(dim))

    def has_pending_table(self) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vec_items_pending'"
        ).fetchone() is not None

    def create_pending_table(self, dim: int) -> None:
        self.conn.execute(_CREATE_PENDING)  # blobs: the dimension is checked on write

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
        self._integrity_error = sqlite_driver.integrity_error()
        self.damaged = False  # set when SQLite reports damage: writes refused until repaired
        self._lock = threading.RLock()
        self._writes = 0  # bumped around every write transaction: read caches key on it
        self._corpora: tuple[tuple[int, int], dict[str, int]] | None = None
        self.newer_schema: str | None = None
        try:
            self._conn = sqlite_driver.connect(self.path, timeout=BUSY_TIMEOUT_S)
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(f"PRAGMA cache_size = {-1024 * int(cache_mb)}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            with self._write() as conn:
                newer = sqlite_driver.migrate(conn)
            self.newer_schema = newer
        except self._database_error as exc:
            raise sqlite_driver.store_error(exc, f"opening SQLite store {self.path!r}") from exc
        self._index: VectorIndex | None = None
        self._index_version: int | None = None

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self, *, repairing: bool = False) -> Iterator[Any]:
        """One IMMEDIATE transaction (the write lock up front: no deadlock), all rolled back on
        an error; a driver error becomes a StoreError naming its cause (a duplicate id: invalid input)."""
        if self.newer_schema is not None:
            raise StoreError(self.newer_schema)
        if self.damaged and not repairing:
            raise StoreError(f"{sqlite_driver.DAMAGED} --repair before writing to it")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except self._operational_error as exc:
                if sqlite_driver.is_damage(exc):
                    raise self._error(exc, "write") from exc
                raise StoreError(f"store is busy or read-only: {exc}") from exc
            self._writes += 1
            try:
                yield self._conn
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, self._integrity_error) and "UNIQUE constraint failed: items.id" \
                        in str(exc):
                    raise InvalidInputError(f"an item with this id already exists: {exc}") from exc
                if isinstance(exc, self._database_error):
                    raise self._error(exc, "write") from exc
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except self._database_error as exc:
                    self._rollback()
                    raise self._error(exc, "commit") from exc
            finally:
                self._writes += 1

    def _rollback(self) -> None:  # SQLite may have rolled back already (a full disk does)
        if self._conn.in_transaction:
            with suppress(self._database_error):
                self._conn.execute("ROLLBACK")

    def _error(self, exc: BaseException, doing: str) -> StoreError:
        if sqlite_driver.is_damage(exc):
            self.damaged = True
        return sqlite_driver.store_error(exc, doing)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, params).fetchall())
            except self._database_error as exc:  # locked too long, corrupt, I/O error
                raise self._error(exc, "query") from exc
            except (UnicodeEncodeError, OverflowError) as exc:  # a value SQLite cannot bind
                raise InvalidInputError(f"a value cannot be used in a query: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- metadata -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(_SET_META, (key, value))

    def vector_dim(self) -> int | None:
        value = self.get_meta(META_VECTOR_DIM)
        return int(value) if value else None

    def ensure_vector_storage(self, dim: int) -> None:
        if self.vector_dim() == dim:
            return
        with self._write() as conn:  # checked again under the write lock: others may race us
            records.ensure_vector_table(_Tables(conn), dim)

    # -- switching models: new vectors beside the old ones, swapped in at the end ---------------

    def begin_reembed(self, model_id: str, dim: int) -> None:
        with self._write() as conn:
            records.begin_reembed(_Tables(conn), model_id, dim)

    def pending_missing_ids(self, after: str, limit: int) -> list[str]:
        return [r[0] for r in self._read(
            "SELECT i.id FROM items i LEFT JOIN vec_items_pending p ON p.id = i.id "
            "WHERE i.id > ? AND (p.id IS NULL OR p.content_hash != i.content_hash) "
            "ORDER BY i.id LIMIT ?", (after, limit))]

    def write_pending_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> None:
        dim = records.pending_dim(self.get_meta(META_PENDING_VECTOR_DIM))
        codec.check_dims(zip(ids, vectors, strict=True), dim, holder="the new model has")
        rows = [(item_id, codec.to_blob(vec), chash)
                for item_id, vec, chash in zip(ids, vectors, content_hashes, strict=True)]
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO vec_items_pending (id, embedding, content_hash) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, "
                "content_hash = excluded.content_hash", rows)

    def finish_reembed(self, model_id: str, dim: int) -> int:
        with self._write() as conn:
            moved = records.finish_reembed(_Tables(conn), model_id, dim)
        self._index = None
        return moved

    def cancel_reembed(self) -> None:
        with self._write() as conn:
            records.cancel_reembed(_Tables(conn))

    # -- writes ---------------------------------------------------------------------------------

    def upsert(
        self, items: Sequence[Item], vectors: Sequence[Vector | None], content_hashes: Sequence[str],
        *, replace: bool,
    ) -> None:
        dim = self.vector_dim()
        conflict = records.ON_CONFLICT_REPLACE if replace else ""
        sql = (f"INSERT INTO items ({', '.join(records.WRITE_COLUMNS)}) "
               f"VALUES ({_marks(len(records.WRITE_COLUMNS))}) {conflict} RETURNING rowid, embedded_hash")
        written: list[tuple[int, Item, Vector | None]] = []
        stale_vectors: list[int] = []
        try:
            with self._write() as conn:
                for item, vec, chash in zip(items, vectors, content_hashes, strict=True):
                    rowid, kept_hash = conn.execute(
                        sql, records.write_values(item, chash, with_vector=vec is not None)).fetchone()
                    if vec is not None:
                        codec.check_dim(vec, dim, label=f"item {item.id!r}: vector")
                        conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                        conn.execute("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                                     (rowid, codec.to_blob(vec)))
                    elif kept_hash is None and dim is not None:
                        conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                        stale_vectors.append(rowid)
                    written.append((rowid, item, vec))
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
        """Only the vector and `embedded_hash` change, so an item rewritten by another
        writer meanwhile is neither overwritten nor given a vector of its old text."""
        codec.check_dims(zip(ids, vectors, strict=True), self.vector_dim())
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

    def get(self, ids: Sequence[str], *, include_expired: bool, now: float) -> list[StoredItem]:
        found: dict[str, StoredItem] = {}
        for chunk in _chunks(list(ids)):
            sql = f"SELECT {_ITEM_COLUMNS} FROM items WHERE id IN ({_marks(len(chunk))})"
            params: list[Any] = list(chunk)
            if not include_expired:
                sql += " AND (expires_at IS NULL OR expires_at > ?)"
                params.append(now)
            for row in self._read(sql, params):
                found[row[0]] = records.row_to_item(row)
        return records.in_order(ids, found)

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

    def iter_items(self, batch_size: int = 500) -> Iterator[list[StoredItem]]:
        last = 0
        while True:
            rows = self._read(
                f"SELECT rowid, {_ITEM_COLUMNS} FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, batch_size))
            if not rows:
                return
            last = rows[-1][0]
            yield [records.row_to_item(r[1:]) for r in rows]

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
        # The partial index holds just the queue; without statistics the planner would scan
        # every item in rowid order instead (every search asks whether the queue is empty).
        return [r[0] for r in self._read(
            "SELECT id FROM items INDEXED BY items_unembedded "
            "WHERE embedded_hash IS NULL OR embedded_hash != content_hash "
            "ORDER BY rowid LIMIT ?", (limit,))]

    # -- retrieval ------------------------------------------------------------------------------

    def text_search(self, query: TextQuery, area: SearchArea, limit: int) -> ScoredIds:
        match = query.fts5()
        if match is None or limit <= 0:
            return []
        wt, wx = self.bm25_weights
        bm25 = f"bm25(items_fts, {float(wt)!r}, {float(wx)!r})"
        if not area.filters.needs_row_filter:
            found = self._text_search_best_first(match, bm25, area, limit)
            if found is not None:
                return found
        where, params = filter_sql(area)
        sql = (
            f"SELECT i.id, {bm25} AS s "
            f"FROM items_fts JOIN items i ON i.rowid = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND {where} ORDER BY s, i.id LIMIT ?"
        )
        rows = self._read(sql, [match, *params, limit])
        return [(r[0], -float(r[1])) for r in rows]

    def _text_search_best_first(
        self, match: str, bm25: str, area: SearchArea, limit: int,
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
        total = max(1, sum(counts.values()))
        searched = total if area.corpora is None else sum(counts.get(c, 0) for c in area.corpora)
        share = searched / total
        if share <= 0:
            return None
        fetch = math.ceil(_FTS_OVERFETCH * limit / share)
        if fetch > _FTS_OVERFETCH_MAX:
            return None  # the corpora are a small share of the store: filter inside the query
        rows = self._read(
            f"SELECT rowid, {bm25} AS s FROM items_fts WHERE items_fts MATCH ? ORDER BY s LIMIT ?",
            [match, fetch])
        complete = len(rows) < fetch  # every matching row was fetched
        if not complete:
            worst = rows[-1][1]
            rows = [r for r in rows if r[1] < worst]
        where, params = filter_sql(area)
        ids: dict[int, str] = {}
        for chunk in _chunks([r[0] for r in rows]):
            ids.update(self._read(
                f"SELECT i.rowid, i.id FROM items i WHERE i.rowid IN ({_marks(len(chunk))}) "
                f"AND {where}", [*chunk, *params]))
        best = sorted((s, ids[rowid]) for rowid, s in rows if rowid in ids)
        if len(best) < limit and not complete:
            return None
        return [(item_id, -float(s)) for s, item_id in best[:limit]]

    def substring_search(self, words: Sequence[str], area: SearchArea, limit: int) -> ScoredIds:
        if not words or limit <= 0:
            return []
        where, params = filter_sql(area)
        hits = " + ".join(
            "(instr(lower(i.text), ?) > 0) + (instr(lower(coalesce(i.title, '')), ?) > 0)"
            for _ in words)
        word_params = [w for w in words for _ in (0, 1)]
        sql = (f"SELECT i.id, {hits} AS s FROM items i WHERE {where} "
               f"AND s > 0 ORDER BY s DESC, i.id LIMIT ?")
        rows = self._read(sql, [*word_params, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def vector_search(self, vector: Vector, area: SearchArea, limit: int) -> ScoredIds:
        dim = self.vector_dim()
        if dim is None or limit <= 0:
            return []
        query = codec.query(vector, dim)
        if query is None:
            return []
        index = self._vector_index(dim)
        allowed = None
        if area.filters.needs_row_filter:
            where, params = filter_sql(area)
            allowed = np.array([r[0] for r in self._read(
                f"SELECT i.rowid FROM items i WHERE {where}", params)], dtype=np.int64)
        f = area.filters
        top = index.search(query, corpora=area.corpora, now=area.now, limit=limit,
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
        try:
            return self._load_vector_index(dim)
        except self._database_error as exc:
            raise self._error(exc, "reading the vectors") from exc

    def _load_vector_index(self, dim: int) -> VectorIndex:
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
        return maintenance.integrity_problems(lambda sql: self._read(sql), self.vector_dim())

    def repair(self) -> list[str]:
        dim = self.vector_dim()
        with self._write(repairing=True) as conn:
            done = maintenance.repair(conn, dim, self.integrity_problems(),
                                      _create_vectors(dim) if dim else "")
        self._index = None
        self.damaged = any(p.startswith("sqlite:") for p in self.integrity_problems())
        return done


def open_sqlite(path: str | Path, **options: Any) -> SQLiteBackend:
    try:
        return SQLiteBackend(path, **options)
    except BackendUnavailableError:
        raise
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
