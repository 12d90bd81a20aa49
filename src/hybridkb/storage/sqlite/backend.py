"""The embedded dialect: one SQLite file, the system of record, with derived indexes beside it.

Items and their vectors (int8 codes and a scale, by rowid) are written in one transaction;
triggers number every committed write in the `changes` log (migration 004). BM25 runs
on a tantivy index in `<file>.idx/text/` that catches up from that log before each
search, and vectors on a memory-mapped base generation (an HNSW graph past a size) plus
an exact delta of later writes, in `<file>.idx/vectors/` (storage/indexes/). What both
dialects do alike (columns, conflict rule, filters, re-embed steps) is in records.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, InvalidInputError, StoreError
from ...model import Item, StoredItem
from ...progress import ProgressFactory, no_progress
from ...textquery import TextQuery
from .. import asked, codec, records
from ..contract import Key, ScoredKeys, SearchArea, Vector
from ..indexes import scan, vector_knn
from ..indexes.sync import TextIndexSync
from ..indexes.text_match import expand_prefixes
from ..indexes.text_schema import title_repeat
from ..indexes.vector_base import Wanted
from ..indexes.vectors import ANN_MODES, VectorIndexSync
from ..records import DEFAULT_BM25_WEIGHTS, META_PENDING_VECTOR_DIM, META_VECTOR_DIM
from ..textcodec import unpacked_rows
from . import derived, maintenance, matching
from . import driver as sqlite_driver
from .changes import SQLiteChanges, prune_passed
from .filters import filter_sql
from .reads import Memo
from .tables import SET_META as _SET_META
from .tables import Tables as _Tables
from .tables import chunks as _chunks
from .tables import create_vectors as _create_vectors
from .tables import hash_blob, hash_text
from .tables import marks as _marks
from .writes import write_rows

__all__ = ["BUSY_TIMEOUT_S", "DEFAULT_BM25_WEIGHTS", "SQLiteBackend", "filter_sql", "open_sqlite"]

BUSY_TIMEOUT_S = 30.0
# Off by default: reading pages through a memory map (`mmap_mb`, e.g. 65536) cuts a
# search's first read of its items by about 40%, but a store file truncated or unreadable under an
# open handle then kills the process with SIGBUS instead of raising StoreError
# (2026-11-27; git history of docs/benchmarks.md). SQLite clamps it to its build's limit.
MMAP_MB = 0
CONCURRENT_MIN = 20_000  # items past which a hybrid search's two retrievals run at once
_READ_COLUMNS = ", ".join(records.READ_COLUMNS)


class SQLiteBackend:
    """One SQLite file (or ":memory:"). Thread-safe through one lock per store."""

    def __init__(self, path: str | Path, *, bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS,
                 cache_mb: int = 64, mmap_mb: int = MMAP_MB, index_dir: str | Path | None = None,
                 progress: ProgressFactory = no_progress, vector_ann: str | None = None) -> None:
        self.path = str(path)
        self.url = self.path
        self.bm25_weights = bm25_weights
        ann = vector_ann or os.environ.get("HYBRIDKB_VECTOR_ANN", "auto")
        if ann not in ANN_MODES:
            raise InvalidInputError(f"vector_ann must be one of {', '.join(ANN_MODES)}, not {ann!r}")
        if self.path != ":memory:":
            parent = Path(self.path).expanduser().resolve().parent
            if not parent.is_dir():
                raise StoreError(f"cannot create store {self.path!r}: folder {parent} does not exist")
        self._operational_error, self._database_error = sqlite_driver.errors()
        self._integrity_error = sqlite_driver.integrity_error()
        self.damaged = False  # set when SQLite reports damage: writes refused until repaired
        self._lock = threading.RLock()
        self._writes = 0  # bumped around every write transaction: read caches key on it
        # What searches ask again and again, kept until the store changes (reads.py).
        self._memo = Memo()
        self._pin = threading.local()  # a search's token, read once (pinned_reads)
        self.newer_schema: str | None = None
        try:
            self._conn = sqlite_driver.connect(self.path, timeout=BUSY_TIMEOUT_S)
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if self.path != ":memory:":
                sqlite_driver.enable_wal(self._conn, BUSY_TIMEOUT_S)
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(f"PRAGMA cache_size = {-1024 * int(cache_mb)}")
            self._conn.execute(f"PRAGMA mmap_size = {1024 * 1024 * int(mmap_mb)}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            with self._write() as conn:
                newer = sqlite_driver.migrate(conn)
            self.newer_schema = newer
        except self._database_error as exc:
            raise sqlite_driver.store_error(exc, f"opening SQLite store {self.path!r}") from exc
        # Derived indexes live in `<file>.idx/` (in memory for ":memory:").
        folder = None
        if self.path != ":memory:":
            folder = Path(index_dir) if index_dir else Path(self.path).expanduser().resolve().with_name(
                Path(self.path).name + ".idx")
        self.index_dir = folder
        self._writes_since_prune = 0
        self._changes = SQLiteChanges(
            self._read, self._write, self.get_meta("store_id") or "",
            None if folder is None else lambda: sqlite_driver.connect(self.path, timeout=BUSY_TIMEOUT_S),
            memo=self._memoized)
        self._text = TextIndexSync(None if folder is None else folder / "text", self._changes, progress,
                                   title_repeat=title_repeat(bm25_weights))
        # "auto": one-bit codes past vector_base.CODES_MIN_ROWS, an HNSW graph (built in the
        # background) where graph_due; "on" forces the graph, "codes" the codes, "off" exact
        # scans (the eval runs them); HYBRIDKB_VECTOR_ANN sets the default.
        self._vectors = VectorIndexSync(None if folder is None else folder / "vectors", self._changes,
                                        ann=ann, progress=progress)

    @property
    def retrieves_concurrently(self) -> bool:
        """Whether a hybrid search runs its text and vector searches at once (pipeline.py):
        tantivy and numpy let go of the GIL, which pays past a few ten thousand items."""
        return self.vector_dim() is not None and sum(self.corpora().values()) >= CONCURRENT_MIN

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self, *, repairing: bool = False, wait: bool = True) -> Iterator[Any]:
        """One IMMEDIATE transaction (the write lock up front: no deadlock), all rolled back on
        an error; a driver error becomes a StoreError naming its cause (a duplicate id: invalid input).
        `wait=False`: a StoreError at once when another writer holds the file."""
        if self.newer_schema is not None:
            raise StoreError(self.newer_schema)
        if self.damaged and not repairing:
            raise StoreError(f"{sqlite_driver.DAMAGED} --repair before writing to it")
        with self._lock:
            try:
                self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000) if wait else 0}")
                self._conn.execute("BEGIN IMMEDIATE")
            except self._operational_error as exc:
                if sqlite_driver.is_damage(exc):
                    raise self._error(exc, "write") from exc
                raise StoreError(f"store is busy or read-only: {exc}") from exc
            finally:
                if not wait:
                    self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
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

    def _memoized(self, name: str, compute: Callable[[], Any]) -> Any:
        """`compute()`, or its answer from before when the store has not changed since."""
        with self._lock:
            token = getattr(self._pin, "token", None)
            if token is None or token[1] != self._writes:  # not pinned, or written since
                token = (self._data_version(), self._writes)
            return self._memo.get(name, token, compute)

    @contextmanager
    def pinned_reads(self) -> Iterator[None]:
        """One `PRAGMA data_version` for everything a search asks: whether the store changed
        is read at its start (another process's commit is seen by the next search)."""
        if getattr(self._pin, "token", None) is not None:
            yield
            return
        with self._lock:
            self._pin.token = (self._data_version(), self._writes)
            self._pin.head = self._changes.log_bounds()[1]
        try:
            yield
        finally:
            self._pin.token = None

    def close(self) -> None:
        self._text.close()
        self._vectors.close()
        with self._lock:
            self._conn.close()

    # -- metadata -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        meta: dict[str, str] = self._memoized("meta", lambda: dict(self._read(
            "SELECT key, value FROM meta")))  # a few small rows, asked for by every search
        return meta.get(key)

    def set_meta(self, key: str, value: str, *, wait: bool = True) -> None:
        with self._write(wait=wait) as conn:
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
        rows = list(zip(ids, map(codec.to_stored_blob, vectors), map(hash_blob, content_hashes), strict=True))
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO vec_items_pending (id, embedding, content_hash) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, "
                "content_hash = excluded.content_hash", rows)

    def finish_reembed(self, model_id: str, dim: int) -> int:
        with self._write() as conn:
            moved = records.finish_reembed(_Tables(conn), model_id, dim)
        return moved

    def cancel_reembed(self) -> None:
        with self._write() as conn:
            records.cancel_reembed(_Tables(conn))

    # -- writes ---------------------------------------------------------------------------------

    def upsert(
        self, items: Sequence[Item], vectors: Sequence[Vector | None], content_hashes: Sequence[str],
        *, replace: bool, prints: Sequence[int] | None = None, within: Sequence[str] | None = None,
    ) -> None:
        dim = self.vector_dim()
        feeding = self._text.is_feeding()  # a bulk write: the batch goes to the text index too
        try:
            with self._write() as conn:
                self._prune_log(conn)
                first_seq = self._log_head(conn)
                docs = write_rows(conn, items, vectors, content_hashes, replace=replace, dim=dim,
                                  feeding=feeding, prints=prints, within=within)
                last_seq = self._log_head(conn)
        except (UnicodeEncodeError, OverflowError) as exc:
            raise InvalidInputError(f"a value cannot be stored: {exc}") from exc
        if feeding:
            # Without `replace` every row was inserted: no index document holds its rowid.
            self._text.feed(docs, first_seq, last_seq, replacing=replace)
        else:
            self._text.kick()

    @staticmethod
    def _log_head(conn: Any) -> int:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Around add_many's batches: each also goes into the text index (feeding); the vector base
        is built while its last commit runs (a failure: the next search's to retry); WAL cut."""
        def settle() -> None:
            if (dim := self.vector_dim()) is not None and not (self.newer_schema or self.damaged):
                with suppress(Exception):
                    self._vectors.settle(dim)
        with maintenance.bulk_checkpoints(self._conn, self._lock), self._text.feeding(meanwhile=settle):
            yield
        if self.index_dir is not None:  # a file, not ":memory:"
            with self._lock, suppress(self._database_error):
                maintenance.truncate_wal(self._conn, self.path, int(BUSY_TIMEOUT_S * 1000))

    def _prune_log(self, conn: Any) -> None:
        """Every ~1000 writes, drop the log rows both derived indexes on disk have passed.
        Never for ":memory:" (its vectors live in the delta, read from the whole log)."""
        self._writes_since_prune += 1
        if self.index_dir is None or self._writes_since_prune < 1000:
            return
        self._writes_since_prune = 0
        prune_passed(conn, self._text.disk_seq(), has_vectors=self.vector_dim() is not None)

    def keep_query_vectors(self, rows: Sequence[asked.Row], now: float, *, measure: bool = True) -> None:
        """Best effort (storage/asked.py): a busy store drops them at once (this backend's lock
        is never held waiting for another writer); `measure`: see measure_on_asked."""
        with self._write(wait=False) as conn:
            asked.keep(conn, rows, now, "?")
        if measure:  # the first time there are enough (not as the store closes)
            self._vectors.measure_on_asked(self.vector_dim())

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
                    "UPDATE items SET embedded_hash = ?1 WHERE id = ?2 AND content_hash = ?1 "
                    "RETURNING rowid, corpus, expires_at, stale", (hash_blob(chash), item_id)).fetchone()
                if row is None:
                    continue
                rowid = row[0]
                conn.execute("DELETE FROM vec_items WHERE rowid = ?", (rowid,))
                conn.execute("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                             (rowid, codec.to_stored_blob(vec)))
                written.append((rowid, Item(text="", id=item_id, corpus=row[1], expires_at=row[2],
                                            stale=bool(row[3])), vec))
        return len(written)

    def delete(self, ids: Sequence[str], *, within: Sequence[str] | None = None) -> int:
        removed: list[int] = []
        guard = "" if within is None else f" AND corpus IN ({_marks(len(within))})"
        with self._write() as conn:
            for chunk in _chunks(list(ids)):
                removed.extend(r[0] for r in conn.execute(
                    f"DELETE FROM items WHERE id IN ({_marks(len(chunk))}){guard} RETURNING rowid",
                    (*chunk, *(within or ()))).fetchall())
            if removed and self.vector_dim() is not None:
                for chunk in _chunks(removed):
                    conn.execute(f"DELETE FROM vec_items WHERE rowid IN ({_marks(len(chunk))})", chunk)
        if removed:
            self._text.kick()
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
            sql = f"SELECT {_READ_COLUMNS} FROM items WHERE id IN ({_marks(len(chunk))})"
            params: list[Any] = list(chunk)
            if not include_expired:
                sql += " AND (expires_at IS NULL OR expires_at > ?)"
                params.append(now)
            for row in unpacked_rows(self._read(sql, params), 3):
                found[row[0]] = records.row_to_item(row)
        return records.in_order(ids, found)

    def items_by_key(self, keys: Sequence[Key]) -> dict[Key, StoredItem]:
        """Retrievals here name items by rowid (what the derived indexes hold): read by the
        table's own key."""
        found: dict[Key, StoredItem] = {}
        for chunk in _chunks(list(keys)):
            found.update((row[0], records.row_to_item(row[1:])) for row in unpacked_rows(self._read(
                f"SELECT rowid, {_READ_COLUMNS} FROM items WHERE rowid IN ({_marks(len(chunk))})", chunk), 4))
        # SQLite gives a deleted item's rowid to the next item written: a rowid deleted since
        # the search began (checked only when the store changed meanwhile: one `PRAGMA
        # data_version`) no longer names the hit's item.
        token = getattr(self._pin, "token", None)
        with self._lock:
            changed = bool(found) and token is not None and token != (self._data_version(), self._writes)
        for rowid in self._changes.deleted_since(self._pin.head, [int(k) for k in found]) if changed else ():
            del found[rowid]
        return found

    def embedded_hashes(self, ids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for chunk in _chunks(list(ids)):
            out.update((r[0], hash_text(r[1])) for r in self._read(
                f"SELECT id, embedded_hash FROM items WHERE embedded_hash IS NOT NULL "
                f"AND id IN ({_marks(len(chunk))})", chunk))
        return out

    def count(self, corpus: str | None = None) -> int:
        counts = self.corpora()
        return sum(counts.values()) if corpus is None else counts.get(corpus, 0)

    def corpora(self) -> dict[str, int]:
        # Every search asks (to resolve its corpora): the counts the write triggers keep
        # (migration 010), kept here until this connection writes or another one commits.
        return dict(self._memoized("corpora", lambda: dict(self._read(
            "SELECT corpus, n FROM corpus_counts WHERE n > 0 ORDER BY corpus"))))

    def value_counts(self, key: str, corpora: Sequence[str]) -> dict[str, int]:
        where = f"corpus IN ({_marks(len(corpora))})"
        query = records.value_counts_sql(key, "json_extract(metadata, ?)", where)
        params = [*([] if key == "kind" else [f'$."{key}"']), *corpora]
        return {str(v): int(n) for v, n in self._read(query, params) if v is not None} if corpora else {}

    def iter_items(self, batch_size: int = 500) -> Iterator[list[StoredItem]]:
        last = 0
        while True:
            rows = self._read(
                f"SELECT rowid, {_READ_COLUMNS} FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, batch_size))
            if not rows:
                return
            last = rows[-1][0]
            yield [records.row_to_item(r[1:]) for r in unpacked_rows(rows, 4)]

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        if self.vector_dim() is None:
            return {}
        out: dict[str, Vector] = {}
        for chunk in _chunks(list(ids)):
            for item_id, blob in self._read(
                f"SELECT i.id, v.embedding FROM items i JOIN vec_items v ON v.rowid = i.rowid "
                f"WHERE i.id IN ({_marks(len(chunk))})", chunk):
                out[item_id] = codec.from_stored_blob(blob)
        return out

    def ids_missing_vectors(self, limit: int, corpora: Sequence[str] | None = None) -> list[str]:
        # The partial index holds just the queue; without statistics the planner would scan
        # every item in rowid order instead (every search asks whether the queue is empty).
        within = "" if corpora is None else f"AND corpus IN ({', '.join('?' * len(corpora)) or 'NULL'}) "
        return list(self._memoized(f"unembedded {limit} {corpora}", lambda: [r[0] for r in self._read(
            "SELECT id FROM items INDEXED BY items_unembedded WHERE (embedded_hash IS NULL OR "
            f"embedded_hash != content_hash) {within}ORDER BY rowid LIMIT ?", (*(corpora or ()), limit))]))

    # -- retrieval ------------------------------------------------------------------------------

    def text_search(self, query: TextQuery, area: SearchArea, limit: int) -> ScoredKeys:
        """BM25 from the tantivy index, caught up with the change log first; filters run
        inside the index. Keyed by rowid. An index that cannot answer (damaged and not
        rebuilt, an engine error) never fails the search: its words are looked for in the
        stored items instead, with a note."""
        if query.is_empty or limit <= 0:
            return []
        try:
            return self._indexed_text_search(query, area, limit)
        except BaseException as exc:  # raised again unless the index failed (derived.py)
            derived.unusable(exc, self._text, "full-text", "a scan of the stored items")
            return self.substring_search([*query.words, *query.prefixes], area, limit)

    def _indexed_text_search(self, query: TextQuery, area: SearchArea, limit: int) -> ScoredKeys:
        index, delta = self._text.view()
        query = expand_prefixes(query, index, delta, area.corpora)
        if query.is_empty:
            return []
        rowids = None
        if area.filters.paths:  # path globs are SQL regexes over metadata.path: the rows, from SQL
            where, params = filter_sql(area)
            rowids = [r[0] for r in self._read(f"SELECT i.rowid FROM items i WHERE {where}", params)]
            if not rowids:
                return []
        top = index.search(query, corpora=area.corpora, filters=area.filters, now=area.now,
                           limit=limit, rowids=rowids, exclude=delta.rowids, match=area.match)
        live = delta.live_rowids()
        if live:  # writes the index does not hold yet: filtered here, scored like the index would
            where, params = filter_sql(area)
            allowed: set[int] = set()
            for chunk in _chunks(live):
                allowed.update(r[0] for r in self._read(
                    f"SELECT i.rowid FROM items i WHERE i.rowid IN ({_marks(len(chunk))}) AND {where}",
                    [*chunk, *params]))
            extra = delta.search(query, index.analyze, index.stats(query, area.corpora), allowed,
                                 area.match)
            top = sorted(top + extra, key=lambda p: (-p[1], p[0]))[:limit]
        return [*top]

    def substring_search(self, words: Sequence[str], area: SearchArea, limit: int) -> ScoredKeys:
        if not words or limit <= 0:
            return []
        return matching.substring_hits(self._read, self._text, self._changes, words, area, limit)

    def vector_search(self, vector: Vector, area: SearchArea, limit: int) -> ScoredKeys:
        """Cosine KNN over the vector index (base + delta, storage/indexes/vectors.py): corpus,
        expiry and staleness are masks there; any other filter is an exact scan of its rows."""
        dim = self.vector_dim()
        if dim is None or limit <= 0:
            return []
        query = codec.query(vector, dim)
        if query is None or not np.any(query):
            return []
        query = np.asarray(query, dtype=np.float32)  # stored vectors are unit: M @ q ranks by cosine
        f = area.filters
        rows = None
        if f.needs_row_filter:  # kinds, scope, metadata, time ranges: the filter's rows, exactly
            where, params = filter_sql(area)
            rows = np.asarray(sorted(r[0] for r in self._read(
                f"SELECT i.rowid FROM items i WHERE {where}", params)), dtype=np.int64)
        rows, excluded = matching.vector_rows(self._text, self._changes, area, rows)  # +word, -word
        wanted = Wanted(area.corpora, area.now, f.include_expired, f.include_stale)
        deep = limit + len(excluded)  # hits holding an excluded word are dropped from this many
        try:
            try:
                base, delta = self._vectors.view(dim, read_only=self.newer_schema is not None or self.damaged)
            except self._database_error as exc:  # read on the index builder's own connection
                raise self._error(exc, "reading the vectors") from exc
            found = vector_knn.knn(base, delta, query, deep, wanted=wanted, rows=rows, source=self._changes)
        except BaseException as exc:  # a damaged base not rebuilt, an unreadable folder: derived.py
            derived.unusable(exc, self._vectors, "vector", "an exact scan of the stored vectors")
            try:
                found = scan.exact_knn(self._changes, dim, query, deep, wanted=wanted, rows=rows)
            except self._database_error as exc:
                raise self._error(exc, "reading the vectors") from exc
        kept: ScoredKeys = [(k, s) for k, s in found if k not in excluded]
        return kept[:limit]

    def _data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    # -- maintenance ----------------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """SQLite's integrity check, items and vectors agreeing by rowid (maintenance.py), and
        the derived indexes (derived.py): every file's checksum, and the text index (once
        caught up with the log) holding exactly the items."""
        problems = maintenance.integrity_problems(lambda sql: self._read(sql), self.vector_dim())
        return problems + derived.problems(
            self.index_dir, self._text, self._vectors, self.vector_dim(), self._changes.item_rowids,
            compare=not any(p.startswith("sqlite:") for p in problems))

    def repair(self) -> list[str]:
        dim = self.vector_dim()
        problems = self.integrity_problems()
        with self._write(repairing=True) as conn:
            done = maintenance.repair(conn, dim, problems, _create_vectors(dim) if dim else "")
        self.damaged = any(p.startswith("sqlite:") for p in maintenance.integrity_problems(
            lambda sql: self._read(sql), dim))
        if not self.damaged and any(("index" in p or p.startswith("sqlite:")) for p in problems):
            done += derived.rebuild(self.index_dir, self._text, self._vectors, dim)
        return done

    def optimize(self) -> dict[str, Any]:
        """Every derived index caught up in the foreground (`hybridkb optimize`): the text
        index holds every committed write, and the vector base every vector, with the graph
        its size calls for; a file a quarter free pages VACUUMed (maintenance.reclaim: best
        effort). A short-lived process never waits for the background build."""
        text = self._text.current()
        out: dict[str, Any] = {"text_documents": text.doc_count(), "text_seq": text.seq,
                               "reclaimed_bytes": 0}
        with self._lock, suppress(self._database_error):  # VACUUM needs room on the disk
            if not (self.newer_schema or self.damaged):
                out["reclaimed_bytes"] = maintenance.reclaim(self._conn)
        dim = self.vector_dim()
        if dim is not None and self.index_dir is not None:
            out.update(self._vectors.summary(dim, self._vectors.optimize(dim)))
        return out

    def rebuild_indexes(self) -> None:
        """Rebuild every derived index from the items (what `check --repair` does)."""
        self._text.rebuild_now()
        dim = self.vector_dim()
        if dim is not None:
            self._vectors.build_now(dim)


def open_sqlite(path: str | Path, **options: Any) -> SQLiteBackend:
    try:
        return SQLiteBackend(path, **options)
    except (BackendUnavailableError, InvalidInputError):
        raise
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot open SQLite store {path!r}: {exc}") from exc
