"""The PostgreSQL benchmark's own measurements (benchmarks/postgres_speed.py) name items as
the store does: its vector recall reads the retriever's keys back as ids."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import hybridkb
from benchmarks import postgres_speed
from benchmarks.data import CORPUS


def test_recall_against_exact_reads_keys_as_ids(pg_url: str) -> None:
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((300, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    items = [{"id": f"x{i:03d}", "corpus": CORPUS, "text": f"item {i}", "vector": vectors[i],
              "metadata": {"dataset": "nfcorpus" if i % 2 else "scifact", "copy": i % 3}}
             for i in range(300)]
    queries = rng.standard_normal((5, 32)).astype(np.float32)
    data = SimpleNamespace(query_vectors=list(queries / np.linalg.norm(queries, axis=1, keepdims=True)))
    with hybridkb.open(pg_url, embedder=None) as kb:  # 300 rows: an exact scan
        kb.add_many(items)
        recall = postgres_speed._recall(kb, data, vectors, items, 5)  # type: ignore[arg-type]
    assert recall == {name: 1.0 for name in postgres_speed.FILTERS}
