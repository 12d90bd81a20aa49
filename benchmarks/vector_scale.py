"""The embedded store's vector search at scale, alone: `kb.search(mode="vector")` against
numpy's exact scan of the same vectors, interleaved per query in one process, with
recall@10 against that exact answer, unfiltered and through a broad and a narrow corpus
filter, and a fresh process's open + first vector answer.

    python -m benchmarks.vector_scale --size 1000000

Items carry a short text ("item N") so the store is about vectors: the benchmark's
vectors (benchmarks/data.py: noisy copies of 8,816 SciFact + NFCorpus embeddings) and its
real test queries. Corpora: "rare" for every 50th item (2%), else "a"/"b" alternately.
JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import hybridkb
from hybridkb.embedding import get_embedder
from hybridkb.evaluation.cache import EmbeddingCache

from .data import DEFAULT_DATASETS, item_vectors, load_data
from .measure import BenchEmbedder

FILTERS = {"none": None, "corpus b (49%)": ["b"], "corpus rare (2%)": ["rare"]}

_FRESH = """
import json, sys, time
start = time.perf_counter()
import numpy as np, hybridkb
from hybridkb.model import now_ts, parse_filters
from hybridkb.storage.contract import SearchArea
kb = hybridkb.open(sys.argv[1], embedder=None, sample_queries=False)
q = np.load(sys.argv[2])
opened = time.perf_counter()
kb.backend.vector_search(q, SearchArea(None, parse_filters(None), now_ts()), 10)
done = time.perf_counter()
print(json.dumps({"open_plus_first_vector_s": round(done - start, 3),
                  "first_vector_s": round(done - opened, 3)}))
"""


def corpus_of(i: int) -> str:
    return "rare" if i % 50 == 0 else ("b" if i % 2 else "a")


def allowed(n: int, corpora: list[str] | None) -> np.ndarray[Any, Any] | None:
    if corpora is None:
        return None
    idx = np.arange(n)
    rare: np.ndarray[Any, Any] = idx % 50 == 0
    if corpora == ["rare"]:
        return rare
    odd: np.ndarray[Any, Any] = idx % 2 == 1
    kept: np.ndarray[Any, Any] = ~rare & (odd if corpora == ["b"] else ~odd)
    return kept


def run(n: int, workdir: Path, queries: int) -> dict[str, Any]:
    model = get_embedder("minilm")
    if model is None:
        raise SystemExit("the benchmark needs the default model")
    data = load_data(DEFAULT_DATASETS, model, n_queries=queries, cache=EmbeddingCache())
    vectors, qv = item_vectors(data, n), data.query_vectors
    store = workdir / f"vectors-{n}.db"
    embedder = BenchEmbedder(model, dict(zip(data.queries, qv, strict=True)))
    out: dict[str, Any] = {"items": n, "queries": len(qv), "load_average_start": list(os.getloadavg()),
                           "started": datetime.now(UTC).isoformat(timespec="seconds")}
    kb = hybridkb.open(store, embedder=embedder, sample_queries=False)
    try:
        start = time.perf_counter()
        for s in range(0, n, 50_000):
            kb.add_many([{"id": f"i{i}", "text": f"item {i}", "vector": vectors[i], "corpus": corpus_of(i)}
                         for i in range(s, min(n, s + 50_000))])
        out["ingest_items_per_s"] = round(n / (time.perf_counter() - start), 1)
        start = time.perf_counter()
        report = kb.optimize()
        out["optimize_s"] = round(time.perf_counter() - start, 1)
        out["first_pass"] = {k: report.get(k) for k in
                             ("first_pass", "codes_rescore", "codes_recall", "graph", "graph_recall")}
        for label, corpora in FILTERS.items():
            keep = allowed(n, corpora)
            for text in data.queries[:5]:  # warm-up
                kb.search(text, mode="vector", limit=10, corpora=corpora)
            store_s, exact_s, recall = [], [], []
            for text, q in zip(data.queries, qv, strict=True):
                t = time.perf_counter()
                scores = vectors @ q
                if keep is not None:
                    scores = np.where(keep, scores, -np.inf)
                exact = np.argpartition(-scores, 9)[:10]
                exact_s.append(time.perf_counter() - t)
                t = time.perf_counter()
                hits = kb.search(text, mode="vector", limit=10, corpora=corpora).hits
                store_s.append(time.perf_counter() - t)
                recall.append(len({f"i{i}" for i in exact} & {h.id for h in hits}) / 10)
            s50, e50 = float(np.median(store_s)), float(np.median(exact_s))
            out[label] = {"store_p50_ms": round(1000 * s50, 2), "numpy_exact_p50_ms": round(1000 * e50, 2),
                          "ratio": round(s50 / e50, 3), "recall@10": round(float(np.mean(recall)), 4)}
            print(label, out[label], flush=True)
    finally:
        kb.close()
    query = workdir / "query.npy"
    np.save(query, qv[0])
    fresh = subprocess.run([sys.executable, "-c", _FRESH, str(store), str(query)], capture_output=True,
                           text=True, check=False)
    out["fresh_process"] = json.loads(fresh.stdout) if fresh.returncode == 0 else fresh.stderr[-500:]
    out["load_average_end"] = list(os.getloadavg())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vector_scale")
    p.add_argument("--size", type=int, default=1_000_000, help="items in the store")
    p.add_argument("--queries", type=int, default=100, help="queries timed per filter")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hybridkb-vectors-"))
    try:
        result = run(args.size, workdir, args.queries)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"vector-scale-{args.size}.json"
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
