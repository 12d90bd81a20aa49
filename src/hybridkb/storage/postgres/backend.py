"""The server backend: PostgreSQL, tsvector/GIN for BM25 and pgvector/IVFFlat for vectors.

One store per database. Items carry a generated, weighted `tsvector` (title 'A', text 'B');
their vectors live in `item_vectors` (created when the embedding dimension is first known),
joined by rowid and deleted with the item (ON DELETE CASCADE). Every write is one
transaction. BM25 top k comes from an impact-ordered index in tables (fulltext.py); vector
search is cosine KNN through an IVFFlat index whose probes are measured (ann.py). What both
dialects do alike (columns, conflict rule, filters, re-embed steps) is in records.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ... import validation
from ...errors import BackendUnavailableError, InvalidInputError, StoreError
from ...model import Item, StoredItem
from ...textquery import TextQuery
from .. import asked, codec, records
from ..contract import Key, ScoredKeys, SearchArea, Vector
from ..records import DEFAULT_BM25_WEIGHTS, META_PENDING_VECTOR_DIM, META_VECTOR_DIM
from . import blockcache, driver
from .driver import redact

__all__ = ["CONNECT_TIMEOUT_S", "HNSW_MIN_ROWS", "VECTOR_INDEX_MIN_ROWS", "PostgresBackend",
           "open_postgres", "redact"]

try:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout

    from . import ann, bulk, fulltext, maintenance, merging, selectivity
    from . import sql as q
    from .replicas import Replicas, wal_position
    from .tables import VectorTables
except ImportError as _exc:  # the optional extra is not installed
    _IMPORT_ERROR: ImportError | None = _exc
else:
    _IMPORT_ERROR = None

if TYPE_CHECKING:
    from psycopg import Connection

T = TypeVar("T")

INSTALL_HINT = "pip install 'hybridkb[postgres]'"
CONNECT_TIMEOUT_S = 10
# Below this many vectors a KNN query is an exact scan (about 15 ms for 10,000 384-d vectors,
# and exact: the SQLite backend's answers); the write that crosses it builds the IVFFlat
# index over them all (ann.py: its lists are chosen from the rows it is built over).
# 0 builds the index with the table.
VECTOR_INDEX_MIN_ROWS = 10_000
HNSW_MIN_ROWS = VECTOR_INDEX_MIN_ROWS  # its name before the index was IVFFlat (issue #16)
COMPACT_MIN_BATCH = 500  # writes of this many items may build the vector index again
_RETRIES = 3  # a write that loses a deadlock or serialization race is run again
# A phrase of stopwords only becomes an empty tsquery, with a NOTICE per query.
_QUIET = "SET client_min_messages = warning"
# "topk": BM25 through the impact-ordered index (fulltext.py); "exact": score every match.
BM25_SEARCHES = ("topk", "exact")
# "topk" only: exact for the best this many, the ranks below filled from the documents the
# early stop has seen, scored by `BM25_TAILS` (fulltext.EXACT_TOP); None: exact to the depth.
BM25_EXACT_TOP: int | None = None
BM25_TAILS = ("bounds", "exact")
# A filter the planner expects to keep fewer rows than this (and < selectivity.BROAD_SHARE
# of the store) is selective: full-text search scores only the rows it keeps, vector search
# scans them exactly. None: selectivity.most_kept_rows, which grows with the store.
FILTERED_EXACT_ROWS: int | None = None
REPLICA_WAIT_S = 1.0  # read-your-writes: how long a replica may take to catch up
DIM_REUSE_S = 1.0  # how long vector_dim() trusts the dimension it last read


def _require_driver() -> None:
    if _IMPORT_ERROR is not None:
        raise BackendUnavailableError(
            f"the PostgreSQL backend needs psycopg 3, psycopg_pool and pgvector: {INSTALL_HINT} "
            f"({_IMPORT_ERROR})"
        ) from _IMPORT_ERROR


class PostgresBackend:
    """A store in one PostgreSQL database, reached through a small connection pool.

    Thread-safe: each call borrows a pooled connection for one statement or transaction.
    """

    # Each retrieval borrows its own pooled connection and is mostly the server's work, so
    # a hybrid search runs the text and vector searches at once (pipeline.py).
    retrieves_concurrently = True

    def __init__(
        self, url: str, *, bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS,
        ranking: str = "bm25", ts_normalization: int = 0,
        vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS, hnsw_min_rows: int | None = None,
        bm25_search: str = "topk", filtered_exact_rows: int | None = FILTERED_EXACT_ROWS,
        bm25_exact_top: int | None = BM25_EXACT_TOP, bm25_tail: str = "bounds",
        bm25_cache_mb: int = blockcache.DEFAULT_MB, replicas: Sequence[str] = (),
        read_your_writes: bool = False, replica_wait: float = REPLICA_WAIT_S,
        pool_min_size: int = 1, pool_max_size: int = 8,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        _require_driver()
        if ranking not in q.RANKINGS:
            raise InvalidInputError(f"unknown ranking {ranking!r}; use one of {', '.join(q.RANKINGS)}")
        if len(bm25_weights) != 2 or any(not (math.isfinite(w) and w >= 0) for w in bm25_weights):
            raise InvalidInputError(f"bm25_weights must be two numbers >= 0, got {bm25_weights!r}")
        self.url = redact(url)
        self._secret_url = url  # only to scrub a driver message that might echo a password
        self.bm25_weights = (float(bm25_weights[0]), float(bm25_weights[1]))
        self.ranking = ranking
        if bm25_search not in BM25_SEARCHES:
            raise InvalidInputError(
                f"unknown bm25_search {bm25_search!r}; use one of {', '.join(BM25_SEARCHES)}")
        self.bm25_search = bm25_search
        if bm25_exact_top is not None and bm25_exact_top < 1:
            raise InvalidInputError(f"bm25_exact_top must be None or >= 1, got {bm25_exact_top!r}")
        if bm25_tail not in BM25_TAILS:
            raise InvalidInputError(
                f"unknown bm25_tail {bm25_tail!r}; use one of {', '.join(BM25_TAILS)}")
        self.bm25_exact_top, self.bm25_tail = bm25_exact_top, bm25_tail
        if (most := filtered_exact_rows) is not None and not (type(most) is int and most >= 0):
            raise InvalidInputError(f"filtered_exact_rows must be None or an integer >= 0, got {most!r}")
        self.filtered_exact_rows = filtered_exact_rows
        self.ts_normalization = int(ts_normalization)
        # `hnsw_min_rows`: the option's name while the index was HNSW, still accepted.
        self.index_min_rows = int(vector_index_min_rows if hnsw_min_rows is None else hnsw_min_rows)
        self._blocks = blockcache.BlockCache(max(0, int(bm25_cache_mb)) << 20)  # BM25 blocks read
        self._merges = merging.Merges(self._write)  # when the BM25 index's blocks are merged
        try:
            in_url = conninfo_to_dict(url)
        except (psycopg.Error, ValueError) as exc:
            reason = self._scrub(" ".join(str(exc).split()))
            raise InvalidInputError(f"not a valid PostgreSQL URL: {self.url}: {reason}") from None
        self.newer_schema: str | None = None
        self._known_dim: tuple[int | None, float] | None = None
        self._connect_kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in in_url:  # the URL's own value wins
            self._connect_kwargs["connect_timeout"] = max(1, math.ceil(connect_timeout))
        conn = self._connect_direct(url)
        try:
            self._migrate(conn)
        finally:
            conn.close()
        self._pool: ConnectionPool[Connection[Any]] = ConnectionPool(
            url, kwargs=self._connect_kwargs, min_size=pool_min_size,
            max_size=max(pool_min_size, pool_max_size), configure=self._configure,
            timeout=connect_timeout, name="hybridkb", open=False,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise BackendUnavailableError(
                f"cannot open a connection pool to PostgreSQL at {self.url}: {self._scrub(str(exc))}"
            ) from None
        if isinstance(replicas, str):
            raise InvalidInputError("replicas is a list of postgresql:// URLs, not one string")
        self._replicas = Replicas(
            list(replicas), connect_kwargs=self._connect_kwargs, configure=self._configure,
            timeout=connect_timeout, max_size=max(1, pool_max_size),
            read_your_writes=read_your_writes, wait=replica_wait) if replicas else None

    # -- plumbing ---------------------------------------------------------------------------

    def _connect_direct(self, url: str) -> Connection[Any]:
        try:
            conn = psycopg.connect(url, **self._connect_kwargs)
            conn.execute(_QUIET)
            return conn
        except (psycopg.Error, ValueError) as exc:
            reason = self._scrub(" ".join(str(exc).split()) or type(exc).__name__)
            raise BackendUnavailableError(
                f"cannot connect to PostgreSQL at {self.url}: {reason}") from None

    def _scrub(self, message: str) -> str:
        return validation.scrub(message, self._secret_url)

    @staticmethod
    def _configure(conn: Connection[Any]) -> None:
        """Set up each pooled connection: quiet notices, the `vector` type adapted."""
        conn.execute(_QUIET)
        register_vector(conn)

    def _migrate(self, conn: Connection[Any]) -> None:
        self.newer_schema = driver.migrate(conn, self.url)

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise BackendUnavailableError(f"no PostgreSQL connection for {self.url}: {exc}") from None
        except psycopg.errors.UniqueViolation as exc:
            raise InvalidInputError(f"an item with this id already exists: {exc}") from exc
        except psycopg.DataError as exc:
            raise InvalidInputError(f"PostgreSQL refused a value: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise StoreError(f"PostgreSQL at {self.url} failed: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"query failed: {exc}") from exc

    def _run(self, work: Callable[[Connection[Any]], T], *, write: bool) -> T:
        """Run `work` on a pooled connection (in one transaction when it writes).

        Run again, up to _RETRIES times, when that cannot have done anything twice: a read
        whose connection turned out to be dead (the server restarted, an idle connection
        was killed), a write whose connection died before its transaction began, or a write
        that lost a deadlock or serialization race (rolled back by the server).
        """
        if write and self.newer_schema is not None:
            raise StoreError(self.newer_schema)
        for attempt in range(_RETRIES):
            used: Connection[Any] | None = None
            began = False
            try:
                with self._connection() as conn:
                    used = conn
                    if not write:
                        return work(conn)
                    with conn.transaction():
                        began = True
                        return work(conn)
            except StoreError as exc:
                lost = used is not None and used.broken and not (write and began)
                raced = write and isinstance(exc.__cause__, pg_errors.DeadlockDetected
                                             | pg_errors.SerializationFailure)
                if not (lost or raced) or attempt == _RETRIES - 1:
                    raise
                if lost:
                    self._pool.check()  # drop every pooled connection that died with it
        raise AssertionError("unreachable")

    def _read(self, query: Any, params: Sequence[Any] = ()) -> list[Any]:
        return self._run(lambda conn: conn.execute(query, params).fetchall(), write=False)

    def _write(self, work: Callable[[Connection[Any]], T]) -> T:
        result = self._run(work, write=True)
        if self._replicas is not None and self._replicas.read_your_writes:
            self._replicas.noted_write(self._run(wal_position, write=False))
        return result

    def _search(self, work: Callable[[Connection[Any]], T]) -> T:
        """A retrieval: on a replica when there are any (see replicas.py), else here."""
        if self._replicas is not None:
            answered, result = self._replicas.run(work)
            if answered:
                return result  # type: ignore[return-value]
        return self._run(work, write=False)

    def close(self) -> None:
        self._replicas.close() if self._replicas is not None else None
        self._pool.close()

    # -- metadata -------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = %s", [key])
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str, *, wait: bool = True) -> None:  # a row lock: brief
        self._write(lambda conn: conn.execute(q.SET_META, [key, value]))

    def keep_query_vectors(self, rows: Sequence[asked.Row], now: float, *, measure: bool = True) -> None:
        """Best effort (storage/asked.py), on the primary, never waiting long for a lock;
        `measure`: the first time there are enough, the probes (not as the store closes)."""
        def work(conn: Connection[Any]) -> None:
            conn.execute("SET LOCAL lock_timeout = '100ms'")
            asked.keep(conn.cursor(), rows, now, "%s")
        self._run(work, write=True)
        if measure:
            self._run(ann.measure_on_asked, write=True)

    @staticmethod
    def _dim(conn: Connection[Any]) -> int | None:
        row = conn.execute("SELECT value FROM meta WHERE key = %s", [META_VECTOR_DIM]).fetchone()
        return int(row[0]) if row else None

    def vector_dim(self) -> int | None:
        """A dimension read (or its absence) is reused for DIM_REUSE_S: `add_many` checks each
        item's vector against it (else a round trip per item). Writes check it again in their
        own transaction, so a dimension another process changed meanwhile lets no vector in."""
        known = self._known_dim
        if known is not None and time.monotonic() - known[1] < DIM_REUSE_S:
            return known[0]
        dim = self._run(self._dim, write=False)
        self._known_dim = (dim, time.monotonic())
        return dim

    def ensure_vector_storage(self, dim: int) -> None:
        if not isinstance(dim, int) or dim < 1:
            raise InvalidInputError(f"vector dimension must be a positive integer, got {dim!r}")

        def work(conn: Connection[Any]) -> None:
            bulk.lock(conn, bulk.LOCK_VECTORS)  # two stores opening at once create it once
            if records.ensure_vector_table(VectorTables(conn), dim) and self.index_min_rows <= 0:
                ann.build(conn, dim)

        self._write(work)
        self._known_dim = None

    # -- switching models: new vectors beside the old ones, swapped in at the end ---------------

    def begin_reembed(self, model_id: str, dim: int) -> None:
        def work(conn: Connection[Any]) -> None:
            bulk.lock(conn, bulk.LOCK_VECTORS)
            records.begin_reembed(VectorTables(conn), model_id, dim)

        self._write(work)

    def pending_missing_ids(self, after: str, limit: int) -> list[str]:
        return [r[0] for r in self._read(
            "SELECT i.id FROM items i LEFT JOIN item_vectors_pending p ON p.id = i.id "
            "WHERE i.id > %s AND (p.id IS NULL OR p.content_hash <> i.content_hash) "
            "ORDER BY i.id LIMIT %s", [after, limit])]

    def write_pending_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> None:
        def work(conn: Connection[Any]) -> None:
            recorded = VectorTables(conn).meta([META_PENDING_VECTOR_DIM]).get(META_PENDING_VECTOR_DIM)
            dim = records.pending_dim(recorded)
            codec.check_dims(zip(ids, vectors, strict=True), dim, holder="the new model has")
            conn.execute(q.UPSERT_PENDING, [list(ids), codec.to_pg(vectors), list(content_hashes)])

        self._write(work)

    def finish_reembed(self, model_id: str, dim: int) -> int:
        """The vector index is built once over the swapped-in vectors."""
        def work(conn: Connection[Any]) -> int:
            bulk.lock(conn, bulk.LOCK_VECTORS)
            moved = records.finish_reembed(VectorTables(conn), model_id, dim)
            if moved >= self.index_min_rows:
                ann.build(conn, dim)
            return moved

        moved = self._write(work)
        self._known_dim = None
        return moved

    def cancel_reembed(self) -> None:
        def work(conn: Connection[Any]) -> None:
            bulk.lock(conn, bulk.LOCK_VECTORS)
            records.cancel_reembed(VectorTables(conn))

        self._write(work)
        self._known_dim = None

    # -- writes ---------------------------------------------------------------------------------

    def upsert(
        self, items: Sequence[Item], vectors: Sequence[Vector | None], content_hashes: Sequence[str],
        *, replace: bool, prints: Sequence[int] | None = None, within: Sequence[str] | None = None,
    ) -> None:
        if not items:
            return
        batch = bulk.Batch(items, vectors, content_hashes, replace=replace, prints=prints, within=within)

        def write(conn: Connection[Any]) -> str | None:
            batch.write(conn, self.index_min_rows)
            return merging.due(conn)
        self._merges.after(self._write(write))
        if len(items) >= COMPACT_MIN_BATCH:
            self._write(lambda conn: ann.rebuild_if_grown(conn, lambda: bulk.lock(conn, bulk.LOCK_VECTORS)))

    def optimize(self) -> dict[str, Any]:
        """Merge the BM25 index's blocks now; build the vector index if it is missing or was
        built over fewer rows, or measure its probes on the queries asked since (ann.py)."""
        self._write(lambda conn: merging.compact(conn))

        def index(conn: Connection[Any]) -> dict[str, Any]:
            return {"bm25_merged": True, **ann.optimize(
                conn, self.index_min_rows, lambda: bulk.lock(conn, bulk.LOCK_VECTORS))}

        return self._write(index)

    def bulk_writes(self) -> AbstractContextManager[None]:
        """Around many batches: a merge small writes call for waits for the end (merging.py)."""
        return self._merges.bulk()

    def write_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> int:
        """Store vectors for items whose text still has the given hash; returns how many.

        Only the vector and `embedded_hash` change: an item rewritten meanwhile keeps
        its new text and gets no vector of its old one.
        """
        if not ids:
            return 0
        by_id = dict(zip(ids, vectors, strict=True))

        def work(conn: Connection[Any]) -> int:
            dim, probes = ann.state(conn)
            codec.check_dims(by_id.items(), dim)
            assert dim is not None
            build = bulk.prepare_vector_write(conn, dim, probes is not None, True)
            rows = conn.execute(q.MARK_EMBEDDED, [list(ids), list(content_hashes)]).fetchall()
            bulk.put_vectors(conn, [r[0] for r in rows], [by_id[r[1]] for r in rows], dim,
                             build, self.index_min_rows)
            return len(rows)

        return self._write(work)

    def delete(self, ids: Sequence[str], *, within: Sequence[str] | None = None) -> int:
        if not ids:
            return 0
        guard = ("", []) if within is None else (" AND corpus = ANY(%s)", [list(within)])
        return self._write(lambda conn: conn.execute(
            "DELETE FROM items WHERE id = ANY(%s)" + guard[0], [list(ids), *guard[1]]).rowcount)

    def touch(self, ids: Sequence[str], now: float) -> None:
        if not ids:
            return
        self._write(lambda conn: conn.execute(
            "UPDATE items SET access_count = access_count + 1, last_accessed_at = %s "
            "WHERE id = ANY(%s)", [now, list(ids)]))

    def purge_expired(self, now: float) -> int:
        return self._write(lambda conn: conn.execute(
            "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= %s", [now]).rowcount)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, ids: Sequence[str], *, include_expired: bool, now: float) -> list[StoredItem]:
        if not ids:
            return []
        rows = (self._read(q.SELECT_ITEMS, [list(ids)]) if include_expired
                else self._read(q.SELECT_LIVE_ITEMS, [list(ids), now]))
        return records.in_order(ids, {row[0]: records.row_to_item(row) for row in rows})

    def items_by_key(self, keys: Sequence[Key]) -> dict[Key, StoredItem]:
        """Retrievals here name items by rowid (the primary key): no id read for a list's
        300 entries."""
        rows = self._read(q.SELECT_ITEMS_BY_ROWID, [[int(k) for k in keys]]) if keys else []
        return {int(row[0]): records.row_to_item(row[1:]) for row in rows}

    def embedded_hashes(self, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        return dict(self._read(
            "SELECT id, embedded_hash FROM items WHERE embedded_hash IS NOT NULL "
            "AND id = ANY(%s)", [list(ids)]))

    # Counts come from corpus_stats (exact: its triggers run in every write's transaction),
    # a few rows per corpus, where count(*) would read an index of every item per search.

    def count(self, corpus: str | None = None) -> int:
        if corpus is None:
            return int(self._read("SELECT coalesce(sum(n_docs), 0) FROM corpus_stats")[0][0])
        return int(self._read(
            "SELECT coalesce(sum(n_docs), 0) FROM corpus_stats WHERE corpus = %s", [corpus])[0][0])

    def corpora(self) -> dict[str, int]:
        return {corpus: int(n) for corpus, n in self._read(
            "SELECT corpus, sum(n_docs) FROM corpus_stats GROUP BY corpus "
            "HAVING sum(n_docs) > 0 ORDER BY corpus")}

    def value_counts(self, key: str, corpora: Sequence[str]) -> dict[str, int]:
        query = records.value_counts_sql(key, "metadata ->> %s", "corpus = ANY(%s)")
        rows = self._read(query, [*([] if key == "kind" else [key]), list(corpora)])
        return {str(v): int(n) for v, n in rows if v is not None}

    def iter_items(self, batch_size: int = 500) -> Iterator[list[StoredItem]]:
        last = 0
        while True:
            rows = self._read(q.SELECT_ITEMS_AFTER, [last, batch_size])
            if not rows:
                return
            last = rows[-1][0]
            yield [records.row_to_item(r[1:]) for r in rows]

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        if not ids:
            return {}

        def work(conn: Connection[Any]) -> list[Any]:
            if self._dim(conn) is None:
                return []
            return conn.execute(
                "SELECT i.id, v.embedding FROM items i JOIN item_vectors v ON v.rowid = i.rowid "
                "WHERE i.id = ANY(%s)", [list(ids)]).fetchall()

        return {item_id: codec.from_pg(vec) for item_id, vec in self._run(work, write=False)}

    def ids_missing_vectors(self, limit: int, corpora: Sequence[str] | None = None) -> list[str]:
        return [r[0] for r in self._read(
            "SELECT id FROM items WHERE (embedded_hash IS NULL OR embedded_hash <> content_hash) AND "
            "(%s::text[] IS NULL OR corpus = ANY(%s)) ORDER BY rowid LIMIT %s",
            [None if corpora is None else list(corpora)] * 2 + [limit])]

    # -- retrieval ------------------------------------------------------------------------------

    def text_search(self, query: TextQuery, area: SearchArea, limit: int) -> ScoredKeys:
        if query.prefixes:  # `comput*`: its most frequent words (as SQLite's)
            query = self._search(lambda conn: fulltext.expand_prefixes(conn, query, area.corpora))
        terms = [" ".join(term) for term in query.terms]
        if not terms or limit <= 0:
            return []
        statement, params = q.text_search(terms, area, limit, ranking=self.ranking,
                                          weights=self.bm25_weights, normalization=self.ts_normalization)
        if self.ranking != "bm25" or self.bm25_search != "topk":
            return [(r[0], float(r[1])) for r in self._search(
                lambda conn: conn.execute(statement, params).fetchall())]

        def work(conn: Connection[Any]) -> list[Any]:
            scoped = not selectivity.keeps_many(conn, area, self.filtered_exact_rows, limit)
            found = fulltext.search(conn, terms, area, limit, self.bm25_weights, self.bm25_exact_top,
                                    self.bm25_tail, self._blocks, scoped=scoped)
            return found if found is not None else conn.execute(statement, params).fetchall()

        return [(r[0], float(r[1])) for r in self._search(work)]

    def substring_search(self, words: Sequence[str], area: SearchArea, limit: int) -> ScoredKeys:
        if not words or limit <= 0:
            return []
        statement, params = q.substring_search(words, area, limit)
        return [(r[0], float(r[1])) for r in self._search(
            lambda conn: conn.execute(statement, params).fetchall())]

    def vector_search(self, vector: Vector, area: SearchArea, limit: int) -> ScoredKeys:
        if limit <= 0:
            return []
        def work(conn: Connection[Any]) -> list[Any]:
            dim, probes = ann.state(conn)
            if dim is None:
                return []
            query = codec.query(vector, dim)
            if query is None or not np.any(query):  # a zero vector has no cosine
                return []
            estimated = selectivity.estimate(conn, area) if probes is not None else None
            selective = not selectivity.many(estimated, self.filtered_exact_rows, limit)
            if probes is None or selective:
                # A small store or a filter keeping few rows: an exact scan is faster, exact.
                statement, params = q.vector_search(query, area, limit, exact=True)
                return conn.execute(statement, params, prepare=False).fetchall()
            rows = self._knn(conn, query, area, limit, ann.filtered_probes(probes, estimated))
            if len(rows) < limit:
                # The lists probed held fewer rows that pass the filter than asked for:
                # answer exactly instead, so `limit` rows come back whenever they exist.
                statement, params = q.vector_search(query, area, limit, exact=True)
                rows = conn.execute(statement, params, prepare=False).fetchall()
            return rows

        return [(r[0], float(r[1])) for r in self._search(work)]

    @staticmethod
    def _knn(conn: Connection[Any], query: Vector, area: SearchArea, limit: int, probes: int,
             explain: bool = False) -> list[Any]:
        """The IVFFlat query, with its settings, in one round trip (a pipeline). Never
        prepared: a plan made once for any filter values scanned 1M vectors (5 s)."""
        statement, params = q.vector_search(query, area, limit, exact=False)
        with conn.pipeline():
            conn.execute(ann.KNN_SETTINGS, [str(probes)])
            cursor = conn.execute(q.explain(statement) if explain else statement, params,
                                  prepare=False)
        return cursor.fetchall()

    def explain_vector_search(self, vector: Vector, area: SearchArea, limit: int) -> str:
        """EXPLAIN of the approximate KNN query (to check that the vector index is used)."""
        rows = self._run(lambda conn: self._knn(conn, codec.as_array(vector), area, limit,
                                                ann.state(conn)[1] or 1, explain=True), write=False)
        return "\n".join(r[0] for r in rows)

    # -- maintenance ----------------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """Empty when sound: statistics, items and vectors agree; the vector index is usable.

        (Items and their tsvectors cannot disagree: the tsvector is a generated column.)
        """
        return self._run(self._integrity_problems, write=False)

    def _integrity_problems(self, conn: Connection[Any]) -> list[str]:
        dim, probes = ann.state(conn)
        return maintenance.integrity_problems(conn, dim, probes is not None,
                                              index_min_rows=self.index_min_rows)

    def repair(self) -> list[str]:
        def work(conn: Connection[Any]) -> list[str]:
            bulk.lock(conn, bulk.LOCK_VECTORS)
            dim, _ = ann.state(conn)
            return maintenance.repair(conn, dim, self._integrity_problems(conn),
                                      lambda: ann.build(conn, dim or 0))

        return self._write(work)


def open_postgres(url: str, **options: Any) -> PostgresBackend:
    """Open (creating and migrating if needed) the store in the database at `url`."""
    _require_driver()
    return PostgresBackend(url, **options)
