"""The approximate vector index on PostgreSQL: pgvector's IVFFlat over the vectors in half
precision, its probes measured per build.

Why IVFFlat and not HNSW (the index before issue #16's fifth pass): on the benchmark's
million items (113 noisy copies of each of 8,816 real embeddings) pgvector's HNSW graph
(m 16, ef_construction 64, ef_search 600) held recall@10 0.755 against exact at 142 ms,
and its build took most of a 20-minute load. IVFFlat with a list per 500 rows, measured
on the same server and store (100 test queries, 300 deep as a search asks): 0.974 at
32 probes in 14.7 ms, built in 117 s; at 100,000 items 0.966 at 20 probes in 6.4 ms, built
in 2.2 s, where HNSW held 0.965 in 5.2 ms after an 18.8 s build (docs/postgres.md).
Since the eleventh pass it has 4 x sqrt(rows) lists (LISTS_PER_SQRT_ROW: 2-6x faster at
equal recall than a list per 500 rows, below); optimize() builds an index with other lists
again. The index is over `embedding::halfvec(dim)` (issue #16, eighth pass): half the pages per
probed list, 0.73-0.82x the time of a bare KNN query at 1M (24-40 probes); the candidates
it picks are re-scored on the stored vectors (sql.py), so half precision only decides
which rows are candidates.

Recall depends on the data and on the queries as much as on the settings, so each build
measures it: queries are answered exactly by a scan and through the index at rising probes;
the fewest probes whose recall@10 reaches RECALL_TARGET is what searches use (kept in
`meta`). The last rung probes every list, so some rung always reaches it. The queries are
the store's own (the last ones it was asked, storage/asked.py) once it has kept enough,
and optimize() measures again as more come; until then pseudo-queries, each a stored
vector moved away from its cluster (moved_queries): sums of six stored vectors (the SQLite
passes' pseudo-queries, indexes/vector_recall.py) asked more than 40 probes at 1M where
real queries need 20, and too few on NFCorpus, whose queries sit farther from the items
than any pseudo-query (docs/postgres.md).

IVFFlat's lists are fixed when it is built (new rows join the nearest list), so once the
store holds GROWTH times the vectors the index was built over, it is built again: under
a new name while searches go on through the old one, then swapped in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from psycopg import sql

from .. import asked, codec
from ..indexes import vector_recall
from ..records import META_VECTOR_DIM
from . import sql as q
from .tables import VectorTables

if TYPE_CHECKING:
    from psycopg import Connection

INDEX = "item_vectors_ivf"
_BUILDING = "item_vectors_ivf_next"  # a rebuild's index until it is swapped in
MAX_DIM = 4000  # pgvector's limit for an index on `halfvec`
# Lists: 4 x sqrt(rows), the low end of faiss's advice for an IVF index (4-16 x sqrt(N)).
# Measured against the list per 500 rows before it (bare KNN 300 deep, recall@10 of the
# exact answer among them, 300 of the set's test queries): 1M benchmark items, 4,000 lists
# at 40 probes 0.970 in 15.0 ms where 2,000 at 80 gave 0.976 in 44.2; NFCorpus 100k, 1,265
# lists at 32 probes 0.967 in 5.2 ms where 200 at 64 gave 0.967 in 31.4 (docs/postgres.md).
LISTS_PER_SQRT_ROW = 4
MIN_LISTS, MAX_LISTS = 10, 10_000
RECALL_TARGET = vector_recall.RECALL_TARGET
PROBE_LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512)
SAMPLE = 100  # pseudo-queries per build (recall@10 of 100 queries: +-0.02 at 0.95)
PARTS = 6  # other stored vectors a pseudo-query is moved towards
MOVED_COS = 0.4  # a pseudo-query's cosine to the stored vector it was moved from
K = vector_recall.K
GROWTH = 4  # rebuilt once the store holds this many times the vectors it was built over
_SAMPLE_PER_LIST = 50  # pgvector's k-means sample: this many rows per list, in memory
_COPY_OUT = "COPY (SELECT embedding FROM item_vectors) TO STDOUT (FORMAT BINARY)"
_FILE_HEAD = 19  # a binary COPY's signature, flags and header extension length
_ROW_HEAD = 10  # per row: field count (2), field length (4), pgvector's dim and unused (2 + 2)
_BLOCK_ROWS = 65_536
META_PROBES = "pg_ivf_probes"
META_RECALL = "pg_ivf_recall"
META_ROWS = "pg_ivf_rows"  # vectors the index was built over
META_ITEMS = "pg_ivf_items"  # items in the store then (corpus_stats: exact, and cheap to read)
META_LISTS = "pg_ivf_lists"
META_ASKED = "pg_ivf_asked"  # asked queries the probes were measured on (0: pseudo-queries)
META_ASKED_THROUGH = "pg_ivf_asked_through"  # the seq of the newest asked query then

# The dimension, and the probes measured when the index was built if it exists.
VECTOR_STATE = sql.SQL(
    "SELECT (SELECT value FROM meta WHERE key = {}), "
    "CASE WHEN to_regclass({}) IS NOT NULL THEN "
    "coalesce((SELECT value::int FROM meta WHERE key = {}), 1) END").format(
        sql.Literal(META_VECTOR_DIM), sql.Literal(INDEX), sql.Literal(META_PROBES))
# Session settings of the pooled connection (they only steer IVFFlat scans), sent with each
# KNN query: relaxed_order lets a filtered scan probe more lists until it has found
# `limit` rows that pass the filter (pgvector >= 0.8).
KNN_SETTINGS = sql.SQL(
    "SELECT set_config('ivfflat.iterative_scan', 'relaxed_order', false), "
    "set_config('ivfflat.probes', %s, false)")
INDEX_VALID = sql.SQL(
    "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass({})").format(sql.Literal(INDEX))


@dataclass(frozen=True, slots=True)
class Calibration:
    probes: int
    recall: float  # recall@10 of the queries measured at `probes`
    asked: int = 0  # how many of those were the store's asked queries (0: pseudo-queries)
    through: int = 0  # the seq of the newest asked query there was (asked.py)


# A filter keeping a share f of the rows: probes / f**2, at most this many times the
# probes. The probes are measured on unfiltered queries; a filter's nearest rows lie in
# lists farther away, all the more when the filter follows the vectors' clusters (one
# dataset of two): at 1,000,000 items and 4,000 lists, a filter keeping 41% held
# recall@10 0.862 at the measured 32 probes, 0.935 at 128, 0.967 at 256 (docs/postgres.md).
FILTERED_PROBES_MAX = 8


def filtered_probes(probes: int, estimated: tuple[float, float] | None) -> int:
    """The probes for a search whose filters keep `estimated` = (rows, store items)."""
    if estimated is None:
        return probes
    share = min(1.0, max(estimated[0], 1.0) / max(estimated[1], 1.0))
    return int(min(probes * FILTERED_PROBES_MAX, math.ceil(probes / share ** 2)))


def lists_for(rows: int) -> int:
    return int(min(MAX_LISTS, max(MIN_LISTS, round(LISTS_PER_SQRT_ROW * math.sqrt(max(rows, 0))))))


def rungs(lists: int) -> list[int]:
    """Probes tried, fewest first; the last probes every list (an exact answer)."""
    return [p for p in PROBE_LADDER if p < lists] + [lists]


def build(conn: Connection[Any], dim: int) -> Calibration | None:
    """Build (or build again) the index over the stored vectors and measure its probes,
    in the caller's transaction; None when the dimension is past pgvector's limit."""
    if dim > MAX_DIM:
        return None
    row = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
    rows = int(row[0]) if row else 0
    lists = lists_for(rows)
    # k-means holds _SAMPLE_PER_LIST rows per list in memory; the server's default
    # maintenance_work_mem (64 MB) is too small for 2,000 lists of 384 dimensions.
    needed_mb = 2 * lists * _SAMPLE_PER_LIST * (4 * dim + 64) // 2**20 + 64
    conn.execute("SELECT set_config('maintenance_work_mem', %s, true) "
                 "WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < %s",
                 [f"{needed_mb}MB", needed_mb * 2**20])
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [INDEX]).fetchone() == (True,)
    name = _BUILDING if exists else INDEX
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(_BUILDING)))
    conn.execute(sql.SQL(
        "CREATE INDEX {} ON item_vectors USING ivfflat ((embedding::{}) halfvec_cosine_ops) "
        "WITH (lists = {})").format(sql.Identifier(name), sql.SQL("halfvec({})").format(
            sql.Literal(dim)), sql.Literal(lists)))
    if exists:  # searches used the old index until here; they wait for the commit now
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(INDEX)))
        conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(
            sql.Identifier(_BUILDING), sql.Identifier(INDEX)))
    # Fresh statistics, or the planner, still counting a handful of rows after a bulk
    # load, prefers a scan and sort over the index it was just given.
    conn.execute("ANALYZE items")
    conn.execute("ANALYZE item_vectors")
    found = measure(conn, rows, lists, dim)
    conn.cursor().executemany(q.SET_META, [
        (META_ROWS, str(rows)), (META_LISTS, str(lists)), (META_ITEMS, str(_items(conn)))])
    return found


def measure(conn: Connection[Any], rows: int, lists: int, dim: int) -> Calibration:
    """calibrate(), its answer kept in `meta` for searches and optimize()."""
    found = calibrate(conn, rows, lists, dim)
    conn.cursor().executemany(q.SET_META, [
        (META_PROBES, str(found.probes)), (META_RECALL, str(found.recall)),
        (META_ASKED, str(found.asked)), (META_ASKED_THROUGH, str(found.through))])
    return found


def calibrate(conn: Connection[Any], rows: int, lists: int, dim: int) -> Calibration:
    """The fewest probes at which the index finds RECALL_TARGET of the exact top 10 (a
    hit scores at least the exact 10th best: ties are equally right) of the store's asked
    queries, or of pseudo-queries while it has too few (asked.py)."""
    found, through = asked.decode(conn.execute(asked.recent_sql("%s"), [dim, asked.MEASURED])
                                  .fetchall(), dim)
    queries = found if found is not None else _pseudo_queries(conn, rows)
    if len(queries) == 0:
        return Calibration(lists, 1.0, 0, through)
    conn.execute("SELECT set_config('ivfflat.iterative_scan', 'off', true)")
    n_asked = 0 if found is None else len(found)
    kth = kth_exact(conn, queries, dim)
    knn = sql.SQL("SELECT -(embedding <#> %s) FROM item_vectors ORDER BY {} LIMIT %s").format(
        q.knn_order(dim))
    wanted = min(K, rows)
    measured: dict[int, Any] = {}  # probes -> each query's recall@10

    def recall_at(probes: int) -> Any:
        if probes not in measured:
            conn.execute("SELECT set_config('ivfflat.probes', %s, true)", [str(probes)])
            per_query = np.zeros(len(queries))
            for i, (query, bar) in enumerate(zip(queries, kth, strict=True)):
                got = conn.execute(knn, [query, query, K]).fetchall()
                per_query[i] = vector_recall.hit_share([score for (score,) in got], bar, wanted)
            measured[probes] = per_query
        return measured[probes]

    # Recall rises with the probes, so the fewest that reach the target are found by halving
    # the ladder (about five rungs measured of 23 at 2,000 lists); the last probes every list.
    ladder = rungs(lists)
    low, high = 0, len(ladder) - 1
    while low < high:
        mid = (low + high) // 2
        if vector_recall.holds(recall_at(ladder[mid]), RECALL_TARGET, sampled=found is not None):
            high = mid
        else:
            low = mid + 1
    return Calibration(ladder[low], round(float(recall_at(ladder[low]).mean()), 4), n_asked, through)


def _pseudo_queries(conn: Connection[Any], rows: int) -> Any:
    """SAMPLE pseudo-queries (moved_queries) from SAMPLE * (1 + PARTS) stored vectors drawn
    from a sample of the table's pages."""
    want = SAMPLE * (1 + PARTS)
    percent = min(100.0, 100.0 * 4 * want / max(rows, 1))
    picked = conn.execute(
        "SELECT embedding FROM item_vectors TABLESAMPLE SYSTEM (%s) REPEATABLE (15) LIMIT %s",
        [percent, want]).fetchall()
    if len(picked) < want:  # a small or sparse table: read it in order instead
        picked = conn.execute("SELECT embedding FROM item_vectors LIMIT %s", [want]).fetchall()
    if not picked:
        return np.zeros((0, 0), dtype=np.float32)
    return moved_queries(np.stack([codec.from_pg(r[0]) for r in picked]).astype(np.float32))


def moved_queries(rows: Any, sample: int = SAMPLE, seed: int = 15) -> npt.NDArray[np.float32]:
    """Stored vectors moved away from their cluster, as real queries sit away from the items:
    each is MOVED_COS of one row plus the rest along the (orthogonalized) sum of PARTS
    others, so its cosine to that row is MOVED_COS."""
    rng = np.random.default_rng(seed)
    n, dim = rows.shape
    need = sample * (1 + PARTS)
    drawn = np.asarray(rows, dtype=np.float64)[rng.choice(n, need, replace=n < need)]
    base, rest = drawn[:sample], drawn[sample:].reshape(sample, PARTS, dim).sum(axis=1)
    base /= np.maximum(np.linalg.norm(base, axis=1, keepdims=True), 1e-12)
    rest -= np.sum(rest * base, axis=1, keepdims=True) * base
    norms = np.linalg.norm(rest, axis=1, keepdims=True)
    rest = np.divide(rest, norms, out=np.zeros_like(rest), where=norms > 1e-9)
    moved = MOVED_COS * base + np.sqrt(1.0 - MOVED_COS**2) * rest
    moved /= np.maximum(np.linalg.norm(moved, axis=1, keepdims=True), 1e-12)
    out: npt.NDArray[np.float32] = moved.astype(np.float32)
    return out


def kth_exact(conn: Connection[Any], queries: Any, dim: int) -> Any:
    """Each query's K-th best exact score, from one binary COPY of the vectors scored in
    blocks by numpy (an exact scan per query in SQL took 0.5-0.8 s at 1M vectors)."""
    row_bytes = _ROW_HEAD + 4 * dim
    dtype = np.dtype([("head", "V", _ROW_HEAD), ("v", ">f4", (dim,))])
    best = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    pending = bytearray()
    started = False

    def score(rows: int) -> None:
        nonlocal best
        block = np.frombuffer(bytes(pending[: rows * row_bytes]), dtype=dtype)["v"].astype(np.float32)
        del pending[: rows * row_bytes]
        both = np.concatenate([best, queries @ block.T], axis=1)
        best = -np.sort(-both, axis=1)[:, :K]

    with conn.cursor(binary=True).copy(_COPY_OUT) as copy:
        for chunk in copy:
            pending += chunk
            if not started and len(pending) >= _FILE_HEAD:
                del pending[:_FILE_HEAD]
                started = True
            if started and len(pending) >= _BLOCK_ROWS * row_bytes:
                score(_BLOCK_ROWS)
    if started and len(pending) >= row_bytes:
        score(len(pending) // row_bytes)  # what is left past the rows is the 2-byte trailer
    if best.shape[1] == 0:
        return np.full(len(queries), -1.0, dtype=np.float32)
    return best[:, -1]


def _items(conn: Connection[Any]) -> int:
    row = conn.execute(q.STORE_ITEMS).fetchone()
    return int(row[0]) if row else 0


def grown(conn: Connection[Any]) -> bool:
    """Whether the store holds GROWTH times the items it held when the index was built
    (items, not vectors: their count is kept by triggers, where counting a large table's
    vectors on every write would cost tens of milliseconds)."""
    built = VectorTables(conn).meta([META_ITEMS]).get(META_ITEMS)
    return built is not None and _items(conn) >= GROWTH * max(int(built), 1)


def rebuild_if_grown(conn: Connection[Any], lock: Callable[[], None]) -> None:
    """Build the index again (after `lock()`) once the store holds GROWTH times the items
    it held at the build: its lists were chosen for fewer rows."""
    dim, probes = state(conn)
    if dim is not None and probes is not None and grown(conn):
        lock()
        build(conn, dim)


def optimize(conn: Connection[Any], min_rows: int, lock: Callable[[], None]) -> dict[str, Any]:
    """Build the index (after `lock()`) if it is missing, was built over another number of
    vectors than the store holds (once it holds `min_rows`) or with other lists than
    lists_for; else measure its probes again when MIN_ASKED queries were asked since; the
    vectors and the index over them: lists, probes and the recall measured."""
    dim, probes = state(conn)
    if dim is None:
        return {"vectors": 0, "first_pass": "exact", "vector_index_built": False}
    row = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
    rows = int(row[0]) if row else 0
    meta = VectorTables(conn).meta([META_ROWS, META_LISTS, META_ASKED, META_ASKED_THROUGH])
    lists = int(meta[META_LISTS]) if META_LISTS in meta else None
    rebuild = rows >= max(min_rows, 1) and dim <= MAX_DIM and (
        probes is None or meta.get(META_ROWS) != str(rows) or lists not in (None, lists_for(rows)))
    if rebuild:
        lock()
        build(conn, dim)
        probes = state(conn)[1]
    elif probes is not None and dim <= MAX_DIM and _asked_since(conn, dim, meta):
        lock()
        measure(conn, rows, lists or lists_for(rows), dim)
        probes = state(conn)[1]
    out: dict[str, Any] = {"vectors": rows, "first_pass": "exact" if probes is None else "ivfflat",
                           "vector_index_built": rebuild}
    if probes is not None:
        meta = VectorTables(conn).meta([META_LISTS, META_PROBES, META_RECALL, META_ASKED])
        if {META_LISTS, META_PROBES, META_RECALL} <= meta.keys():  # an index this code built
            out.update(lists=int(meta[META_LISTS]), probes=probes,
                       probe_recall=float(meta[META_RECALL]),
                       measured_on_asked=int(meta.get(META_ASKED) or 0))
    return out


def measure_on_asked(conn: Connection[Any]) -> bool:
    """Probes measured on pseudo-queries, measured again on the store's asked queries once
    it has kept MIN_ASKED (asked.py): once per store, after a sample was written (later,
    optimize() measures as more come). Skipped while another connection does it."""
    dim, probes = state(conn)
    if dim is None or probes is None or dim > MAX_DIM:
        return False
    meta = VectorTables(conn).meta([META_ASKED, META_LISTS])
    if int(meta.get(META_ASKED) or 0) or not _asked_since(conn, dim, meta):
        return False
    got = conn.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                       ["hybridkb.measure"]).fetchone()
    if not (got and got[0]) or int(VectorTables(conn).meta([META_ASKED]).get(META_ASKED) or 0):
        return False  # another connection measures, or has measured meanwhile
    row = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
    rows = int(row[0]) if row else 0
    measure(conn, rows, int(meta.get(META_LISTS) or lists_for(rows)), dim)
    return True


def _asked_since(conn: Connection[Any], dim: int, meta: dict[str, str]) -> bool:
    """Whether the store was asked MIN_ASKED queries since the probes were measured on them
    (all it kept, when they were measured on pseudo-queries); `meta` holds META_ASKED and
    META_ASKED_THROUGH as read."""
    through = int(meta.get(META_ASKED_THROUGH) or 0) if int(meta.get(META_ASKED) or 0) else 0
    row = conn.execute(asked.count_after_sql("%s"), [dim, through]).fetchone()
    return row is not None and int(row[0]) >= asked.MIN_ASKED


def state(conn: Connection[Any]) -> tuple[int | None, int | None]:
    """The vector dimension (None: no vectors yet) and the probes KNN queries use (None:
    no vector index)."""
    row = conn.execute(VECTOR_STATE).fetchone()
    return (int(row[0]) if row and row[0] else None), (int(row[1]) if row and row[1] else None)
