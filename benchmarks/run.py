"""One benchmark run: for each store size, build, ingest, query, and compare every
figure with its baseline measured in the same process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import hybridkb
from hybridkb.embedding import Embedder, get_embedder
from hybridkb.evaluation.cache import EmbeddingCache
from hybridkb.model import Filters, now_ts
from hybridkb.storage import codec
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.sqlite import driver as sqlite_driver

from . import peers, stages, whatif
from .baselines import BM25Baseline, NumpyExact
from .data import CORPUS, DEFAULT_DATASETS, BenchData, item_texts, item_vectors, load_data, make_items
from .engines import BareTantivy, BareVectors, Fts5Path
from .measure import (
    BenchEmbedder,
    clock,
    current_rss_mb,
    peak_rss_mb,
    ratios,
    remove_store,
    stats,
    store_files,
)

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parent.parent
VEC0_KNN = "SELECT rowid, distance FROM vec_items WHERE embedding MATCH ? AND k = ?"


@dataclass(slots=True)
class Options:
    sizes: Sequence[int] = (10_000, 100_000)
    queries: int = 300
    warmup: int = 20
    limit: int = 10
    embed_items: int = 500  # items ingested with the real model, per size
    embedder: str = "minilm"
    datasets: Sequence[Path] = DEFAULT_DATASETS
    cache: bool = True  # keep source and query vectors in the embedding cache
    workdir: Path = field(default_factory=lambda: ROOT / "benchmarks" / "results" / "stores")
    keep_stores: bool = False
    vec0: bool = True
    profile: bool = True
    serve: bool = True  # the fresh-process serving measurement (cold query, RSS)
    whatif: bool = True  # re-measure hybrid with a faster dedup and an in-memory BM25
    peers: Sequence[str] = ("lancedb", "chroma")  # beside hybridkb, when installed (peers.py)


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    conn = sqlite_driver.connect(":memory:", timeout=1.0)
    try:
        sqlite_version, vec_version = conn.execute(
            "SELECT sqlite_version(), vec_version()").fetchone()
    finally:
        conn.close()
    import bm25s

    return {
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(), "numpy": np.__version__, "bm25s": bm25s.__version__,
        "sqlite": sqlite_version, "sqlite_vec": vec_version,
        "sqlite_driver": sqlite_driver.driver().__name__, "hybridkb": hybridkb.__version__,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "library default"),
    }


def run(options: Options, log: Log = print) -> dict[str, Any]:
    model = get_embedder(options.embedder)
    if model is None:
        raise ValueError("the benchmark needs an embedder")
    started = datetime.now(UTC)
    log(f"loading {', '.join(p.name for p in options.datasets)} and their vectors "
        f"({model.model_id})")
    data, load_s = clock(load_data, options.datasets, model, n_queries=options.queries,
                         cache=EmbeddingCache() if options.cache else None)
    log(f"  {len(data.sources)} sources, {len(data.queries)} queries "
        f"({'cached' if data.cached else f'embedded in {data.embed_seconds:.0f} s'})")
    options.workdir.mkdir(parents=True, exist_ok=True)
    sizes = [run_size(options, data, model, n, log) for n in options.sizes]
    return {
        "benchmark": "hybridkb speed", "started": started.isoformat(timespec="seconds"),
        "seconds": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": "python -m " + " ".join(["benchmarks", *sys.argv[1:]]),
        "machine": machine(),
        "options": {k: (str(v) if isinstance(v, Path) else
                        [str(x) for x in v] if k == "datasets" else v)
                    for k, v in asdict(options).items()},
        "data": {**data.describe(), "load_seconds": round(load_s, 1)},
        "sizes": sizes,
    }


def run_size(options: Options, data: BenchData, model: Embedder, n: int, log: Log) -> dict[str, Any]:
    log(f"\n== {n:,} items ==")
    out: dict[str, Any] = {"items": n, "load_average_start": list(os.getloadavg())}
    vectors = item_vectors(data, n)
    items = make_items(data, n, vectors)
    ids = [it["id"] for it in items]
    texts = item_texts(items)
    payload = sum(len(t.encode("utf-8")) for t in texts) + vectors.nbytes
    rss = {"process_start_mb": current_rss_mb()}

    log("baselines: bm25s index, numpy matrix")
    bm25, bm25_s = clock(BM25Baseline, texts)
    exact = NumpyExact(vectors)
    rss["after_baselines_mb"] = current_rss_mb()

    store = options.workdir / f"bench-{n}.db"
    remove_store(store)
    embedder = BenchEmbedder(model, dict(zip(data.queries, data.query_vectors, strict=True)))
    log("ingest (vectors given)")
    kb = hybridkb.open(store, embedder=embedder, sample_queries=False)
    try:
        _, ingest_s = clock(kb.add_many, items)
        # Searchable by text: the first search reads the text index add_many fed; the first
        # vector search maps the vector base add_many built before it returned.
        _, text_ready_s = clock(kb.search, data.queries[0], mode="fts", limit=options.limit)
        _, vector_ready_s = clock(kb.search, data.queries[0], mode="vector", limit=options.limit)
        backend: Any = kb.backend  # the SQLite dialect's derived indexes
        dim = backend.vector_dim()
        # A vector base build, timed: the background one the load or that search started
        # (a graph where the base's size calls for one), waited for; else, none running, a
        # second full build of the base add_many already built, timed on purpose.
        worker = backend._vectors._worker
        timed = "background" if worker is not None and worker.is_alive() else "again"
        if timed == "background":
            _, build_s = clock(backend._vectors.wait)
        else:
            _, build_s = clock(backend._vectors.build_now, dim)
        graph = bool(backend._vectors.summary(dim, True)["graph"])
        files_open = store_files(store)
        index_bytes = peers.folder_bytes(Path(f"{store}.idx"))
    finally:
        kb.close()
    log("previous path: FTS5 table of the same texts")
    fts5 = Fts5Path(options.workdir / f"fts5-{n}.db", [it.get("title") for it in items],
                    [it["text"] for it in items])
    del items
    files_closed = store_files(store)
    out["ingest"] = {
        "without_embedding": {
            "items": n, "seconds": round(ingest_s, 3), "items_per_s": round(n / ingest_s, 1),
            "baseline": "bm25s tokenize + index of the same texts (in memory, no vectors)",
            "baseline_items_per_s": round(n / bm25_s, 1),
            "ratio": round((n / ingest_s) / (n / bm25_s), 3),
            "text_index_ready_s": round(text_ready_s, 3),
            "searchable_items_per_s": round(n / (ingest_s + text_ready_s), 1),
            "vector_base_ready_s": round(vector_ready_s, 3),
            # "background": the build under way after the load, waited for; "again": a
            # second build, add_many's own being inside "seconds" (report.vector_build_row).
            "vector_base_build": timed,
            "vector_base_build_s": round(build_s, 3),
            "vector_base_build_vectors_per_s": round(n / build_s, 1),
            "vector_base_graph": graph,
        },
    }
    out["size"] = {
        "db_bytes": files_open["db"], "wal_bytes": files_open["wal"],
        "db_plus_wal_bytes": files_open["db"] + files_open["wal"],
        "db_bytes_after_close": files_closed["db"],
        "index_bytes": index_bytes,
        "footprint_bytes": files_open["db"] + files_open["wal"] + index_bytes,
        "bytes_per_item": round((files_open["db"] + files_open["wal"]) / n, 1),
        "baseline": "raw payload: UTF-8 title+text plus float32 vectors",
        "baseline_bytes": payload,
        "ratio": round((files_open["db"] + files_open["wal"]) / payload, 3),
    }

    if options.serve:
        log("serving from a fresh process (cold first query, peak RSS)")
        out["serve"] = _serve(options, data, store, vectors, exact, n)

    kb = hybridkb.open(store, embedder=embedder, sample_queries=False)
    vec0 = _vec0_store(store, int(kb.backend.vector_dim() or 0))  # the previous path's table
    try:
        out["cold"] = _cold(options, kb, store, vec0, data, n)
        log(f"queries: {len(data.queries)} per mode after {options.warmup} warm-up")
        out["latency"], floor = _latency(options, kb, embedder, data, bm25, exact, fts5, ids)
        chosen = [p for p in peers.available() if p in options.peers]
        held: BM25Baseline | None = bm25 if options.whatif else None
        del bm25  # the engines below run without the baseline's index in memory (1M: GBs)
        if chosen:
            log(f"peers in the same run: {', '.join(chosen)}")
            positions = {r: k for k, r in enumerate(_rowids(kb.backend._conn, ids))}
            area = SearchArea(None, Filters(), now_ts())
            truth, stored_truth = _truths(vectors, data.query_vectors, exact, options.limit)
            out["peers"] = peers.measure(
                options.workdir, kb, texts, vectors, data.queries, data.query_vectors, truth,
                lambda q: [positions[r] for r, _ in kb.backend.vector_search(q, area, options.limit)],
                limit=options.limit, warmup=options.warmup, hybridkb_ingest_s=ingest_s,
                hybridkb_first_fts_s=text_ready_s, hybridkb_bytes=out["size"]["footprint_bytes"],
                names=chosen, stored_truth=stored_truth, log=log)
        log("searches right after a write (an agent's remember, then recall)")
        out["after_write"] = _after_write(options, kb, data)
        if options.whatif:
            log("what-if: faster dedup, in-memory BM25")
            assert held is not None
            memory = whatif.MemoryBM25(_rowids(kb.backend._conn, ids), held)  # SQLite's keys
            out["whatif"] = whatif.measure(kb, data.queries, floor, memory,
                                           limit=options.limit, warmup=options.warmup)
            out["whatif"]["vector_binary_prefilter"] = whatif.binary_prefilter(
                vectors, data.query_vectors, exact, k=options.limit)
        if options.vec0:
            log("sqlite-vec vec0 KNN on the same store")
            out["vec0"] = _vec0(options, store, vec0, data, exact, ids)
        if options.profile:
            log("stage breakdown and cProfile")
            out["stages"] = {mode: stages.stage_breakdown(kb, data.queries, mode=mode,
                                                          limit=options.limit)
                             for mode in ("hybrid", "fts", "vector")}
            profile_path = options.workdir.parent / f"profile-hybrid-{n}.txt"
            profile_path.write_text(stages.cprofile_top(kb, data.queries), encoding="utf-8")
            out["stages"]["cprofile"] = str(profile_path)
        if options.embed_items > 0:
            log(f"ingest with embedding: {options.embed_items} more items, the real model")
            out["ingest"]["with_embedding"] = _ingest_embedded(options, kb, model, data, n)
    finally:
        kb.close()
        fts5.close()
    rss["process_peak_mb"] = peak_rss_mb()
    out["rss"] = rss
    out["load_average_end"] = list(os.getloadavg())
    vec0.unlink(missing_ok=True)
    if not options.keep_stores:
        remove_store(store)
    _summary(out, log)
    return out


def _serve(options: Options, data: BenchData, store: Path, vectors: np.ndarray[Any, Any],
           exact: NumpyExact, n: int) -> dict[str, Any]:
    npz = options.workdir / f"queries-{n}.npz"
    np.savez(npz, texts=np.array(data.queries), vectors=data.query_vectors)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.serve", str(store), str(npz), options.embedder],
            cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
        if proc.returncode:  # its own traceback, not only the exit status
            raise RuntimeError(f"benchmarks.serve exited with {proc.returncode}: {proc.stderr[-3000:]}")
    finally:
        npz.unlink(missing_ok=True)
    served: dict[str, Any] = json.loads(proc.stdout)
    # The baseline process: the same imports, np.load of the matrix, the same searches.
    served["vector_matrix_mb"] = round(vectors.nbytes / 2**20, 1)
    served["rss_over_imports_mb"] = round(served["peak_rss_mb"] - served["rss_after_imports_mb"], 1)
    served["ratio_rss_over_imports_to_matrix"] = round(
        served["rss_over_imports_mb"] / max(served["vector_matrix_mb"], 0.1), 3)
    return served


def _vec0_store(store: Path, dim: int) -> Path:
    """The store's vectors copied into a sqlite-vec `vec0` table of a file beside it: where
    the store kept them until its migration 009, for the previous path's figures."""
    path = store.with_name(store.name + ".vec0.db")
    path.unlink(missing_ok=True)
    conn = sqlite_driver.connect(str(path), timeout=30.0)
    try:
        conn.execute("ATTACH DATABASE ? AS store", (str(store),))
        conn.execute(f"CREATE VIRTUAL TABLE vec_items USING vec0 (embedding float[{dim}] "
                     "distance_metric=cosine)")
        conn.execute("BEGIN")
        last = 0  # the store keeps half precision (codec.to_stored_blob); vec0 takes float32
        while rows := conn.execute("SELECT rowid, embedding FROM store.vec_items WHERE rowid > ? "
                                   "ORDER BY rowid LIMIT 20000", (last,)).fetchall():
            conn.executemany("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)",
                             [(r, codec.to_blob(codec.from_stored_blob(b))) for r, b in rows])
            last = int(rows[-1][0])
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE store")
    finally:
        conn.close()
    return path


AFTER_WRITE_ROUNDS = 40


def _after_write(options: Options, kb: hybridkb.KnowledgeBase, data: BenchData) -> dict[str, Any]:
    """What an agent meets: one item written (its vector given), then a hybrid search; the
    same search asked again with nothing written in between is the baseline. The items are
    deleted afterwards."""
    after, again = [], []
    written = [f"after-write-{i}" for i in range(AFTER_WRITE_ROUNDS)]
    for i, item_id in enumerate(written):
        text = data.queries[i % len(data.queries)]
        kb.add_many([{"id": item_id, "corpus": CORPUS, "text": f"a note on {text}",
                      "vector": data.query_vectors[i % len(data.queries)]}])
        after.append(clock(kb.search, text, limit=options.limit)[1])
        again.append(clock(kb.search, text, limit=options.limit)[1])
    kb.delete_many(written)
    kb.backend._text.current()  # the deletes folded in before the next stage measures
    p50, base = float(np.median(after)) * 1000, float(np.median(again)) * 1000
    return {"rounds": AFTER_WRITE_ROUNDS, "hybrid_p50_ms": round(p50, 2),
            "hybrid_mean_ms": round(float(np.mean(after)) * 1000, 2),
            "baseline": "the same search again, nothing written since",
            "baseline_p50_ms": round(base, 2), "ratio": round(p50 / base, 3)}


def _cold(options: Options, kb: hybridkb.KnowledgeBase, store: Path, vec0: Path,
          data: BenchData, n: int) -> dict[str, Any]:
    """Open + first hybrid query on fresh handles (three times; the indexes exist, the
    files are in the OS page cache), beside the previous path's cold cost: reading every
    vector out of the vec0 table into a matrix before the first vector answer."""
    dim = int(kb.backend.vector_dim() or 0)
    text = data.queries[1]

    def open_and_query() -> None:
        fresh = hybridkb.open(store, embedder=kb.embedder, sample_queries=False)
        try:
            fresh.search(text, limit=options.limit)
        finally:
            fresh.close()

    runs = [clock(open_and_query)[1] for _ in range(3)]

    def read_vec0() -> None:
        conn = sqlite_driver.connect(str(vec0), timeout=30.0)
        try:
            blobs = [r[0] for r in conn.execute("SELECT embedding FROM vec_items")]
            np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(-1, dim)
        finally:
            conn.close()

    base_s = clock(read_vec0)[1]
    ms, base_ms = float(np.median(runs)) * 1000, base_s * 1000
    return {"open_first_hybrid_ms": round(ms, 2), "baseline": "previous path: read vec0 whole",
            "baseline_ms": round(base_ms, 2), "ratio": round(ms / base_ms, 3), "runs": 3,
            "items": n, "note": "median of 3 fresh opens; the files are in the OS page cache"}


def _latency(options: Options, kb: hybridkb.KnowledgeBase, embedder: BenchEmbedder,
             data: BenchData, bm25: BM25Baseline, exact: NumpyExact, fts5: Fts5Path,
             ids: Sequence[str]) -> tuple[dict[str, Any], list[float]]:
    """The latency figures, and the per-query numpy + bm25s seconds."""
    limit = options.limit
    pairs = list(zip(data.queries, data.query_vectors, strict=True))
    tantivy, bare_vectors = BareTantivy(kb), BareVectors(kb)
    recall: list[float] = []
    bare_recall: list[float] = []
    backend: Any = kb.backend
    area = SearchArea(None, Filters(), now_ts())
    rowid_of = dict(backend._read("SELECT id, rowid FROM items", ()))
    index_of = {rowid_of[i]: k for k, i in enumerate(ids)}

    def one_round(text: str, qv: np.ndarray[Any, Any], bare_first: bool) -> dict[str, tuple[float, int]]:
        # Interleaved per query so machine noise hits every figure alike. Whatever runs
        # first after numpy's scan of the whole matrix meets cold caches, and the next
        # search of the same query warm ones: the bare engines go first on every other
        # query, so neither side always gets the other's warm-up.
        out: dict[str, tuple[float, int]] = {}
        want, t = clock(exact.search, qv, limit)
        out["numpy"] = (t, len(want))

        def bare() -> None:
            got, t = clock(bare_vectors.search, qv, limit)
            out["usearch"] = (t, len(got))
            bare_recall.append(len({index_of.get(g, -1) for g in got} & set(want)) / max(1, len(want)))
            got, t = clock(tantivy.search, text, limit)
            out["tantivy"] = (t, len(got))

        if bare_first:
            bare()
        r, t = clock(kb.search, text, mode="vector", limit=limit)
        out["vector"] = (t, len(r.hits))
        # recall of the index itself (the pipeline's collapse of near-duplicates aside)
        raw = backend.vector_search(qv, area, limit)
        recall.append(len({index_of[h] for h, _ in raw} & set(want)) / max(1, len(want)))  # keys: rowids
        r, t = clock(kb.search, text, mode="fts", limit=limit)
        out["fts"] = (t, len(r.hits))
        r, t = clock(kb.search, text, limit=limit)
        out["hybrid"] = (t, len(r.hits))
        if not bare_first:
            bare()
        got, t = clock(fts5.search, text, limit)
        out["fts5"] = (t, len(got))
        r, t = clock(bm25.search, text, limit)
        out["bm25s"] = (t, len(r))
        return out

    for i, (text, qv) in enumerate(pairs[: options.warmup]):
        one_round(text, qv, i % 2 == 1)
    recall.clear()
    bare_recall.clear()
    rounds = [one_round(text, qv, i % 2 == 1) for i, (text, qv) in enumerate(pairs)]
    col = {name: [r[name][0] for r in rounds] for name in rounds[0]}
    hits = {name: float(np.mean([r[name][1] for r in rounds])) for name in rounds[0]}
    col["numpy+bm25s"] = [a + b for a, b in zip(col["numpy"], col["bm25s"], strict=True)]

    # With the query embedding: the real model embeds each query inside the search.
    embedder.live = True
    embedder.model.embed_query(data.queries[0])  # load the model outside the timings
    for text, _ in pairs[: min(5, options.warmup)]:
        kb.search(text, limit=limit)
    embedder.embed_seconds.clear()
    live: dict[str, list[float]] = {"vector": [], "hybrid": [], "embed": [],
                                    "numpy+embed": [], "numpy+bm25s+embed": []}
    for i, (text, _) in enumerate(pairs):
        for mode in ("vector", "hybrid"):
            _, t = clock(kb.search, text, mode=mode, limit=limit)
            e = embedder.embed_seconds[-1]
            live[mode].append(t)
            live["embed"].append(e)
            if mode == "vector":
                live["numpy+embed"].append(col["numpy"][i] + e)
            else:
                live["numpy+bm25s+embed"].append(col["numpy+bm25s"][i] + e)
    embedder.live = False

    s = {name: stats(v) for name, v in col.items()}
    ls = {name: stats(v) for name, v in live.items()}
    figures = {
        "limit": limit, "queries": len(pairs), "warmup": options.warmup,
        "mean_hits": hits,
        "baselines": {"bm25s": {**bm25.describe(), **s["bm25s"]},
                      "numpy": {**exact.describe(), **s["numpy"]},
                      "numpy+bm25s": s["numpy+bm25s"],
                      "fts5": {"what": "previous path: FTS5 bm25(2, 1), same MATCH", **s["fts5"]},
                      "fts5+numpy": stats([a + b for a, b in zip(col["fts5"], col["numpy"], strict=True)]),
                      "tantivy": {"what": "the store's tantivy index alone", **s["tantivy"]},
                      "usearch": {"what": "the store's vector base alone ("
                                  + bare_vectors.what + ")",
                                  **s["usearch"], "recall@10": round(float(np.mean(bare_recall)), 4)}},
        "vector_recall@10": round(float(np.mean(recall)), 4),
        "without_embedding": {
            "fts": {**s["fts"], "baseline": "bm25s", "ratio": ratios(s["fts"], s["bm25s"])},
            "vector": {**s["vector"], "baseline": "numpy",
                       "ratio": ratios(s["vector"], s["numpy"])},
            "hybrid": {**s["hybrid"], "baseline": "numpy+bm25s",
                       "ratio": ratios(s["hybrid"], s["numpy+bm25s"])},
        },
        "embed_query": ls["embed"],
        "with_embedding": {
            "fts": {**s["fts"], "baseline": "bm25s", "ratio": ratios(s["fts"], s["bm25s"]),
                    "note": "no query embedding in FTS mode"},
            "vector": {**ls["vector"], "baseline": "numpy+embed",
                       "ratio": ratios(ls["vector"], ls["numpy+embed"])},
            "hybrid": {**ls["hybrid"], "baseline": "numpy+bm25s+embed",
                       "ratio": ratios(ls["hybrid"], ls["numpy+bm25s+embed"])},
        },
    }
    return figures, col["numpy+bm25s"]


def _vec0(options: Options, store: Path, vec0: Path, data: BenchData, exact: NumpyExact,
          ids: Sequence[str]) -> dict[str, Any]:
    """sqlite-vec's own brute-force KNN over the same vectors (k = limit), beside numpy."""
    conn = sqlite_driver.connect(str(vec0), timeout=30.0)
    try:
        conn.execute("ATTACH DATABASE ? AS store", (str(store),))
        rowid_to_index = {rowid: i for i, rowid in enumerate(_rowids(conn, ids))}
        k = options.limit
        pairs = list(zip(data.queries, data.query_vectors, strict=True))
        for _, qv in pairs[: min(3, options.warmup)]:
            conn.execute(VEC0_KNN, (qv.tobytes(), k)).fetchall()
        times, base, overlap = [], [], []
        for _, qv in pairs:
            rows, t = clock(lambda q: conn.execute(VEC0_KNN, (q.tobytes(), k)).fetchall(), qv)
            top, tb = clock(exact.search, qv, k)
            times.append(t)
            base.append(tb)
            got = {rowid_to_index.get(r[0]) for r in rows}
            overlap.append(len(got & set(top)) / max(1, len(top)))
    finally:
        conn.close()
    s, b = stats(times), stats(base)
    return {"k": k, **s, "baseline": "numpy", "baseline_p50_ms": b["p50_ms"],
            "ratio": ratios(s, b), "recall_vs_numpy": round(float(np.mean(overlap)), 4),
            "sql": VEC0_KNN}


def _truths(vectors: np.ndarray[Any, Any], queries: np.ndarray[Any, Any], exact: NumpyExact,
            k: int) -> tuple[list[list[int]], list[list[int]]]:
    """Each query's exact top k over the vectors given and over the values the store keeps,
    computed before the peers run: the stored values' matrix (1.5 GB at 1M) is gone by then."""
    stored = NumpyExact(stored_matrix(vectors))
    return ([exact.search(q, k) for q in queries], [stored.search(q, k) for q in queries])


def stored_matrix(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The values the store keeps for `vectors` (codec.stored_rows), 65,536 rows at a time."""
    out = np.empty(vectors.shape, dtype=np.float32)
    for start in range(0, len(vectors), 65_536):
        out[start:start + 65_536] = codec.stored_rows(vectors[start:start + 65_536])
    return out


def _rowids(conn: Any, ids: Sequence[str]) -> list[int]:
    found = dict(conn.execute("SELECT id, rowid FROM items").fetchall())
    return [found[i] for i in ids]


def _ingest_embedded(options: Options, kb: hybridkb.KnowledgeBase, model: Embedder,
                     data: BenchData, n: int) -> dict[str, Any]:
    m = options.embed_items
    items = make_items(data, m, start=n)  # new, distinct items: the model embeds each one
    texts = item_texts(items)
    model.embed_documents(texts[:1])  # load the model outside the timings
    _, base_s = clock(model.embed_documents, texts)
    _, ingest_s = clock(kb.add_many, items)
    return {"items": m, "seconds": round(ingest_s, 3), "items_per_s": round(m / ingest_s, 2),
            "baseline": "the model's embed_documents on the same texts",
            "baseline_items_per_s": round(m / base_s, 2),
            "ratio": round((m / ingest_s) / (m / base_s), 3),
            "note": f"added to the {n:,}-item store after the query measurements"}


def _summary(out: dict[str, Any], log: Log) -> None:
    lat = out["latency"]
    for mode, fig in lat["without_embedding"].items():
        log(f"  {mode:7s} p50 {fig['p50_ms']:8.2f} ms  p95 {fig['p95_ms']:8.2f}  "
            f"p99 {fig['p99_ms']:8.2f}   x{fig['ratio'].get('p50', float('nan')):.2f} "
            f"{fig['baseline']}")
    aw = out.get("after_write")
    if aw:
        log(f"  hybrid right after a write p50 {aw['hybrid_p50_ms']:.2f} ms "
            f"(x{aw['ratio']:.2f} the same search again)")
    ing = out["ingest"]["without_embedding"]
    log(f"  ingest {ing['items_per_s']:.0f} items/s (x{ing['ratio']:.2f} bm25s index build); "
        f"store {out['size']['db_plus_wal_bytes'] / 2**20:.1f} MiB")
