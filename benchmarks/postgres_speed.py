"""PostgreSQL backend speed on the SQLite benchmark's items and queries.

python -m benchmarks.postgres_speed [--sizes 10000,100000] [--queries 200] [--warmup 20]

Starts a throwaway PostgreSQL + pgvector server (tests/pgserver.py, default settings),
ingests the items of benchmarks.data with their cached vectors (add_many, batches of
2,000; hnsw_min_rows set to the store size, so the write that crosses it builds the HNSW
index once), then times FTS, vector and hybrid search (limit 10, query vectors looked up,
modes interleaved per query after a warm-up) and prints a markdown table beside the
SQLite figures of the docs/benchmarks.md run of 2026-11-22T15:38:50 (copied into SQLITE).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

import hybridkb
from hybridkb.embedding import Embedder, get_embedder
from hybridkb.evaluation.cache import EmbeddingCache
from hybridkb.model import Filters
from hybridkb.storage.contract import SearchArea

from .data import CORPUS, DEFAULT_DATASETS, BenchData, item_vectors, load_data, make_items
from .measure import BenchEmbedder, clock, stats
from .run import ROOT

BATCH = 2000
LIMIT = 10
MODES = ("fts", "vector", "hybrid")
# SQLite (p50 ms, p95 ms) and ingest items/s from docs/benchmarks.md, run of
# 2026-11-22T15:38:50 (300 queries in the same order, load average 4.5-5.2).
SQLITE: dict[int, dict[str, Any]] = {
    10_000: {"fts": (18.35, 41.02), "vector": (9.75, 16.23), "hybrid": (25.21, 51.07),
             "ingest": 2866.0},
    100_000: {"fts": (86.67, 234.0), "vector": (36.45, 56.54), "hybrid": (112.0, 269.0),
              "ingest": 1502.0},
}


def measure(dsn: str, n: int, data: BenchData, model: Embedder, queries: int,
            warmup: int) -> dict[str, Any]:
    out: dict[str, Any] = {"items": n, "load_start": os.getloadavg()}
    vectors = item_vectors(data, n)
    items = make_items(data, n, vectors)
    ids = [it["id"] for it in items]
    embedder = BenchEmbedder(model, dict(zip(data.queries, data.query_vectors, strict=True)))
    kb = hybridkb.open(dsn, embedder=embedder, hnsw_min_rows=n)
    try:
        marks = [time.perf_counter()]
        _, ingest_s = clock(kb.add_many, items, batch_size=BATCH,
                            progress=lambda _k: marks.append(time.perf_counter()))
        del items
        batches = np.diff(marks)  # the last batch crosses hnsw_min_rows: it builds the index
        typical = float(np.median(batches[:-1])) if len(batches) > 1 else 0.0
        out.update(ingest_s=ingest_s, ingest_per_s=n / ingest_s,
                   ingest_per_s_no_hnsw=n / (ingest_s - float(batches[-1]) + typical),
                   last_batch_s=float(batches[-1]), typical_batch_s=typical,
                   hnsw_build_s=float(batches[-1]) - typical)
        scope = SearchArea(corpora=(CORPUS,), filters=Filters(), now=time.time())
        plan = kb.backend.explain_vector_search(data.query_vectors[0], scope, LIMIT)
        out["hnsw_used"] = "hnsw" in plan.lower()
        out["plan"] = "\n".join(ln for ln in plan.splitlines() if "Scan" in ln)
        pairs = list(zip(data.queries, data.query_vectors, strict=True))

        def one_round(text: str) -> dict[str, float]:
            return {m: clock(kb.search, text, mode=m, limit=LIMIT)[1] for m in MODES}

        for text, _ in pairs[:warmup]:
            one_round(text)
        rounds = [one_round(text) for text, _ in pairs[:queries]]
        out["latency"] = {m: stats([r[m] for r in rounds]) for m in MODES}
        out["queries"] = len(rounds)
        # recall@10 of the backend's vector retriever (HNSW) against exact cosine.
        hit = []
        for _, qv in pairs[:queries]:
            exact = {ids[i] for i in np.argpartition(-(vectors @ qv), LIMIT)[:LIMIT]}
            got = {r[0] for r in kb.backend.vector_search(qv, scope, LIMIT)}
            hit.append(len(exact & got) / LIMIT)
        out["recall_at_10"] = float(np.mean(hit))
    finally:
        kb.close()
    out["load_end"] = os.getloadavg()
    return out


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| items | figure | PostgreSQL p50 | PostgreSQL p95 | SQLite p50 | SQLite p95 "
            "| PG / SQLite p50 | PG / SQLite p95 |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ref = SQLITE.get(r["items"], {})
        for m in MODES:
            lat, base = r["latency"][m], ref.get(m, (float("nan"), float("nan")))
            rows.append(f"| {r['items']:,} | {m} (ms) | {lat['p50_ms']:.2f} | {lat['p95_ms']:.2f} "
                        f"| {base[0]:.2f} | {base[1]:.2f} | {lat['p50_ms'] / base[0]:.2f}x "
                        f"| {lat['p95_ms'] / base[1]:.2f}x |")
        sq = ref.get("ingest", float("nan"))
        rows.append(f"| {r['items']:,} | ingest, vectors given (items/s) | "
                    f"{r['ingest_per_s']:,.0f} | - | {sq:,.0f} | - "
                    f"| {r['ingest_per_s'] / sq:.2f}x | - |")
    notes = []
    for r in results:
        notes.append(
            f"- {r['items']:,} items: ingest {r['ingest_s']:.1f} s incl. the HNSW build "
            f"(last batch {r['last_batch_s']:.1f} s vs {r['typical_batch_s']:.2f} s typical: "
            f"build ~{r['hnsw_build_s']:.1f} s; {r['ingest_per_s_no_hnsw']:,.0f} items/s "
            f"without it); HNSW index in the KNN plan: {'yes' if r['hnsw_used'] else 'no'}; "
            f"vector recall@10 vs exact {r['recall_at_10']:.3f}; {r['queries']} queries; "
            f"load average {r['load_start'][0]:.1f} at start, {r['load_end'][0]:.1f} at end.")
    return "\n".join([*rows, "", *notes])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.postgres_speed")
    p.add_argument("--sizes", default="10000", help="comma-separated store sizes")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--embedder", default="minilm")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.replace("_", "").split(",") if s.strip()]
    model = get_embedder(args.embedder)
    if model is None:
        raise SystemExit("the benchmark needs an embedder")
    data = load_data(DEFAULT_DATASETS, model, n_queries=max(args.queries, args.warmup),
                     cache=EmbeddingCache())
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import PgServer  # type: ignore[import-not-found]

    started = datetime.now(UTC)
    results = []
    srv = PgServer()
    srv.start()
    try:
        for n in sizes:
            t0 = time.perf_counter()
            dsn = srv.create_database(f"bench{n}")
            print(f"== {n:,} items ==", file=sys.stderr, flush=True)
            results.append(measure(dsn, n, data, model, args.queries, args.warmup))
            srv.drop_database(f"bench{n}")
            print(f"   {time.perf_counter() - t0:.0f} s; plan:\n{results[-1]['plan']}",
                  file=sys.stderr, flush=True)
    finally:
        srv.stop()
    print(f"Run {started.isoformat(timespec='seconds')}, {os.cpu_count()} cores; command: "
          f"`python -m benchmarks.postgres_speed {' '.join(sys.argv[1:] if argv is None else argv)}`\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
