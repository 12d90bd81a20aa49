"""A fresh process that opens a built store and serves queries in each mode:
its first vector query (cold: the matrix is read from the database) and its peak
RSS are what a process serving this store pays.

    python -m benchmarks.serve STORE QUERIES.npz EMBEDDER   -> JSON on stdout
"""

from __future__ import annotations

import json
import sys

import numpy as np

import hybridkb
from hybridkb.embedding import get_embedder

from .measure import BenchEmbedder, clock, current_rss_mb, peak_rss_mb

SERVED_PER_MODE = 100


def serve(store: str, queries_npz: str, embedder: str) -> dict[str, float]:
    rss_imports = current_rss_mb()
    data = np.load(queries_npz, allow_pickle=False)
    texts = [str(t) for t in data["texts"]]
    model = get_embedder(embedder)
    assert model is not None
    kb, open_s = clock(hybridkb.open, store, sample_queries=False,
                       embedder=BenchEmbedder(model, dict(zip(texts, data["vectors"], strict=True))))
    try:
        _, first_vector_s = clock(kb.search, texts[0], mode="vector")
        _, second_vector_s = clock(kb.search, texts[0], mode="vector")
        for mode in ("fts", "vector", "hybrid"):
            for text in texts[:SERVED_PER_MODE]:
                kb.search(text, mode=mode)
    finally:
        kb.close()
    return {
        "open_ms": round(open_s * 1000, 3),
        "first_vector_query_ms": round(first_vector_s * 1000, 3),
        "second_vector_query_ms": round(second_vector_s * 1000, 3),
        "rss_after_imports_mb": rss_imports,
        "peak_rss_mb": peak_rss_mb(),
    }


if __name__ == "__main__":
    print(json.dumps(serve(*sys.argv[1:4])))
