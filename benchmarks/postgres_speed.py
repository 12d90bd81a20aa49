"""PostgreSQL backend speed beside SQLite and an exact reference, in one run.

python -m benchmarks.postgres_speed [--sizes 100000] [--large] [--queries 200] [--warmup 20]

Starts a throwaway PostgreSQL + pgvector server (tests/pgserver.py; shared_buffers 1 GB,
maintenance_work_mem 4 GB for the index builds), and per size:
- ingests the items of benchmarks.data with their cached vectors (add_many, batches of
  50,000 by default (`--batch`), so COPY, the first two rebuilding the GIN index;
  vector_index_min_rows set to the store size, so the last batch builds the IVFFlat
  index once and measures its probes), then merges the BM25 index's blocks (`optimize()`, timed apart);
- builds the same store in SQLite (a temporary file) for its figures;
- times, interleaved query by query after a warm-up, `kb.search(q, limit=10)` in fts,
  vector and hybrid mode (query vectors looked up: embedding excluded) on PostgreSQL
  (top-k BM25), on the same database with `bm25_search="exact"` (every match scored: the
  exact reference) and on SQLite;
- measures vector recall@10 of the PostgreSQL retriever against exact cosine (numpy),
  with no filter, a broad filter (metadata dataset = nfcorpus, ~41% of the items) and a
  selective one (metadata copy = 0, 8,816 items). Without statistics on JSON values the
  planner expects both filters to keep few rows, so both take the exact scan at 100,000.
`--large` adds 1,000,000 items. Prints a markdown table; JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import hybridkb
from hybridkb.embedding import Embedder, get_embedder
from hybridkb.evaluation.cache import EmbeddingCache
from hybridkb.model import Filters
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import ann

from .data import CORPUS, DEFAULT_DATASETS, BenchData, item_vectors, load_data, make_items
from .measure import BenchEmbedder, clock, stats
from .run import ROOT

BATCH = 50_000  # add_many's batch_size: a large batch per transaction (2,000 before issue #16's ingest pass)
LIMIT = 10
MODES = ("fts", "vector", "hybrid")
SERVER = {"shared_buffers": "1GB", "maintenance_work_mem": "4GB", "max_wal_size": "8GB",
          "work_mem": "32MB"}
FILTERS: dict[str, dict[str, Any]] = {
    "none": {}, "broad (dataset = nfcorpus)": {"dataset": "nfcorpus"},
    "selective (copy = 0)": {"copy": 0}}


def _ingest(kb: hybridkb.KnowledgeBase, items: list[dict[str, Any]], batch: int = BATCH) -> float:
    return clock(kb.add_many, items, batch_size=batch)[1]


def _recall(kb: hybridkb.KnowledgeBase, data: BenchData, vectors: Any, items: list[dict[str, Any]],
            queries: int) -> dict[str, float]:
    out = {}
    ids = np.array([it["id"] for it in items])
    for name, meta in FILTERS.items():
        keep = np.array([all(it["metadata"].get(k) == v for k, v in meta.items()) for it in items])
        filters = Filters(metadata=tuple((k, (v,)) for k, v in meta.items()))
        area = SearchArea(corpora=(CORPUS,), filters=filters, now=time.time())
        hit = []
        for qv in data.query_vectors[:queries]:
            scores = vectors[keep] @ qv
            exact = set(ids[keep][np.argpartition(-scores, LIMIT)[:LIMIT]])
            keys = [k for k, _ in kb.backend.vector_search(qv, area, LIMIT)]
            got = {item.id for item in kb.backend.items_by_key(keys).values()}  # keys: rowids
            hit.append(len(exact & got) / LIMIT)
        out[name] = float(np.mean(hit))
    return out


def measure(dsn: str, n: int, data: BenchData, model: Embedder, queries: int,
            warmup: int, batch: int = BATCH) -> dict[str, Any]:
    out: dict[str, Any] = {"items": n, "batch": batch, "load_start": os.getloadavg()}
    vectors = item_vectors(data, n)
    items = make_items(data, n, vectors)
    embedder = BenchEmbedder(model, dict(zip(data.queries, data.query_vectors, strict=True)))
    pg = hybridkb.open(dsn, embedder=embedder, vector_index_min_rows=n, sample_queries=False)
    exact = hybridkb.open(dsn, embedder=embedder, bm25_search="exact", sample_queries=False)
    folder = tempfile.mkdtemp(prefix="hkb-bench-")
    lite = hybridkb.open(str(Path(folder) / "kb.db"), embedder=embedder, sample_queries=False)
    try:
        out["pg_ingest_s"] = _ingest(pg, items, batch)
        out["pg_merge_s"] = clock(pg.backend.optimize)[1]  # type: ignore[attr-defined]
        out["vector_index"] = {key: pg.backend.get_meta(key) for key in (  # type: ignore[attr-defined]
            ann.META_LISTS, ann.META_PROBES, ann.META_RECALL, ann.META_ROWS)}
        out["sqlite_ingest_s"] = _ingest(lite, items, batch)
        print(f"   ingest: PostgreSQL {n / out['pg_ingest_s']:,.0f} items/s, SQLite "
              f"{n / out['sqlite_ingest_s']:,.0f} items/s", file=sys.stderr, flush=True)
        stores = {"pg": pg, "pg_exact": exact, "sqlite": lite}

        def one_round(text: str) -> dict[str, float]:
            times = {f"{s}:{m}": clock(kb.search, text, mode=m, limit=LIMIT)[1]
                     for s, kb in stores.items() for m in MODES
                     if not (s == "pg_exact" and m == "vector")}
            return times

        for text in data.queries[:warmup]:
            one_round(text)
        rounds = [one_round(text) for text in data.queries[:queries]]
        out["latency"] = {k: stats([r[k] for r in rounds]) for k in rounds[0]}
        out["queries"] = len(rounds)
        out["recall_at_10"] = _recall(pg, data, vectors, items, queries)
        same = 0
        for text in data.queries[:queries]:  # the top-k path and the exact one agree
            a = pg.search(text, mode="fts", limit=LIMIT).ids
            same += a == exact.search(text, mode="fts", limit=LIMIT).ids
        out["fts_same_as_exact"] = same / queries
    finally:
        pg.close()
        exact.close()
        lite.close()
        shutil.rmtree(folder, ignore_errors=True)  # the SQLite file and its index folder
    out["load_end"] = os.getloadavg()
    return out


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| items | mode (limit 10) | PostgreSQL p50 / p95 ms | exact BM25 reference p50 / p95 ms "
            "| SQLite p50 / p95 ms | PG / exact p50 | PG / SQLite p50 |",
            "|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lat = r["latency"]
        for m in MODES:
            pg, lite = lat[f"pg:{m}"], lat[f"sqlite:{m}"]
            ref = lat.get(f"pg_exact:{m}")
            ref_cell = f"{ref['p50_ms']:.1f} / {ref['p95_ms']:.1f}" if ref else "-"
            ratio = f"{pg['p50_ms'] / ref['p50_ms']:.2f}x" if ref else "-"
            rows.append(f"| {r['items']:,} | {m} | {pg['p50_ms']:.1f} / {pg['p95_ms']:.1f} | {ref_cell} "
                        f"| {lite['p50_ms']:.1f} / {lite['p95_ms']:.1f} | {ratio} "
                        f"| {pg['p50_ms'] / lite['p50_ms']:.2f}x |")
    rows += ["", "| items | figure | PostgreSQL | SQLite | ratio |", "|---:|---|---:|---:|---:|"]
    for r in results:
        n = r["items"]
        pg_rate, lite_rate = n / r["pg_ingest_s"], n / r["sqlite_ingest_s"]
        rows.append(f"| {n:,} | ingest, vectors given (items/s, incl. the vector index) | {pg_rate:,.0f} "
                    f"| {lite_rate:,.0f} | {pg_rate / lite_rate:.2f}x |")
        rows.append(f"| {n:,} | BM25 index merge after the load (s) | {r['pg_merge_s']:.1f} | - | - |")
        ivf = r.get("vector_index") or {}
        if ivf.get(ann.META_PROBES):
            rows.append(f"| {n:,} | IVFFlat lists / probes (pseudo-query recall@10 at the build) | "
                        f"{ivf[ann.META_LISTS]} / {ivf[ann.META_PROBES]} ({ivf[ann.META_RECALL]}) | - | - |")
        for name, value in r["recall_at_10"].items():
            rows.append(f"| {n:,} | vector recall@10 vs exact, filter {name} | {value:.3f} | 1.000 | - |")
        rows.append(f"| {n:,} | FTS top 10 identical to the exact reference | "
                    f"{r['fts_same_as_exact']:.1%} | - | - |")
    notes = [f"- {r['items']:,} items: batches of {r.get('batch', BATCH):,}, {r['queries']} queries; "
             f"load average {r['load_start'][0]:.1f} "
             f"at start, {r['load_end'][0]:.1f} at end (2 shared cores)." for r in results]
    return "\n".join([*rows, "", *notes])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.postgres_speed")
    p.add_argument("--sizes", default="100000", help="comma-separated store sizes")
    p.add_argument("--large", action="store_true", help="add 1,000,000 items")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=BATCH, help="add_many's batch_size for the ingest")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.replace("_", "").split(",") if s.strip()]
    if args.large:
        sizes.append(1_000_000)
    model = get_embedder(args.embedder)
    if model is None:
        raise SystemExit("the benchmark needs an embedder")
    data = load_data(DEFAULT_DATASETS, model, n_queries=max(args.queries, args.warmup),
                     cache=EmbeddingCache())
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import PgServer  # type: ignore[import-not-found]

    started = datetime.now(UTC)
    results = []
    srv = PgServer(settings=SERVER)
    srv.start()
    try:
        for n in sizes:
            t0 = time.perf_counter()
            dsn = srv.create_database(f"bench{n}")
            print(f"== {n:,} items ==", file=sys.stderr, flush=True)
            results.append(measure(dsn, n, data, model, args.queries, args.warmup, args.batch))
            srv.drop_database(f"bench{n}")
            print(f"   {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        srv.stop()
    command = " ".join(sys.argv[1:] if argv is None else argv)
    head = (f"Run {started.isoformat(timespec='seconds')}, {os.cpu_count()} cores; command: "
            f"`python -m benchmarks.postgres_speed {command}`\n")
    print(head)
    print(table(results))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    (out / f"postgres-speed-{stamp}.json").write_text(json.dumps(results, indent=1, default=float))
    (out / f"postgres-speed-{stamp}.md").write_text(head + "\n" + table(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
