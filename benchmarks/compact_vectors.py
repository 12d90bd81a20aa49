"""python -m benchmarks.compact_vectors [--embedder minilm] [--dataset DIR ...]

What keeping item vectors compactly costs in ranking: each dev set's corpus and judged
queries, embedded by the real model (the eval's embedding cache), ranked by exact cosine
on float32 vectors, on float16 ones, and on the values the store keeps (codec.stored:
int8 codes and a scale per row); prints nDCG@10 of each, one JSON line a data set.
Ties go to the earlier document, as the store's exact scan breaks them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybridkb.embedding import get_embedder
from hybridkb.evaluation import load, metrics
from hybridkb.evaluation.cache import EmbeddingCache
from hybridkb.evaluation.runner import embed
from hybridkb.progress import no_progress
from hybridkb.storage import codec

from .data import DEFAULT_DATASETS

K = 10


def compare(folder: Path, embedder: str) -> dict[str, object]:
    data = load(folder)
    model = get_embedder(embedder)
    if model is None:
        raise SystemExit("needs an embedder")
    queries = [q for q in data.queries if q.id in data.qrels]
    ids = [d.id for d in data.corpus]
    got = embed(model, data, queries, EmbeddingCache(), no_progress)
    docs = np.stack([codec.normalized(v, None, label="doc") for v in np.asarray(got.docs)])
    asked = np.stack([got.queries[q.text] for q in queries]).astype(np.float32)
    judged = {q.id: data.qrels[q.id] for q in queries}
    out: dict[str, object] = {"dataset": folder.name, "queries": len(queries)}
    order = np.arange(len(ids))
    for kind, rows in (("float32", docs), ("float16", docs.astype(np.float16).astype(np.float32)),
                       ("stored", codec.stored_rows(docs))):
        scores = asked @ rows.T
        run = {q.id: [ids[i] for i in np.lexsort((order, -scores[j]))[:K]]
               for j, q in enumerate(queries)}
        out[kind] = round(float(metrics.evaluate(run, judged)["ndcg@10"]), 5)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compact_vectors", description=__doc__)
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--dataset", type=Path, action="append")
    args = p.parse_args(argv)
    folders = args.dataset or [*DEFAULT_DATASETS, DEFAULT_DATASETS[0].parent / "locomo-dev"]
    for folder in folders:
        print(json.dumps(compare(folder, args.embedder)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
