"""python -m benchmarks.footprint [--items 100000] [--out benchmarks/results/stores]

The whole footprint of a store on disk (database, WAL, the text index, the vector base)
at three moments of its life: after `add_many` of the benchmark's items (vectors given)
and a first search; after 60 asked queries and `optimize()` (the vector base measured
again on them); after the process closed it and another opened and searched it. Prints
one JSON object. A superseded vector generation left on disk shows as growth between the
first and the later figures.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hybridkb
from hybridkb.embedding import get_embedder
from hybridkb.evaluation.cache import EmbeddingCache

from .data import DEFAULT_DATASETS, item_vectors, load_data, make_items
from .measure import BenchEmbedder, remove_store
from .peers import folder_bytes
from .run import ROOT

ASKED = 60


def footprint(store: Path) -> dict[str, float]:
    parts = {"db": store.stat().st_size,
             "wal": Path(f"{store}-wal").stat().st_size if Path(f"{store}-wal").exists() else 0,
             "text_index": folder_bytes(Path(f"{store}.idx/text")),
             "vector_index": folder_bytes(Path(f"{store}.idx/vectors"))}
    parts["total"] = sum(parts.values())
    return {k: round(v / 1e6, 1) for k, v in parts.items()}


def measure(items: int, out: Path, embedder: str = "minilm",
            datasets: Sequence[Path] = DEFAULT_DATASETS, cache: bool = True) -> dict[str, Any]:
    model = get_embedder(embedder)
    if model is None:
        raise SystemExit("the footprint benchmark needs an embedder")
    data = load_data(datasets, model, n_queries=ASKED + 1, cache=EmbeddingCache() if cache else None)
    rows = make_items(data, items, item_vectors(data, items))
    out.mkdir(parents=True, exist_ok=True)
    store = out / f"footprint-{items}.db"
    remove_store(store)
    bench = BenchEmbedder(model, dict(zip(data.queries, data.query_vectors, strict=True)))
    result: dict[str, Any] = {"items": items, "MB": "10^6 bytes"}
    try:
        with hybridkb.open(str(store), embedder=bench) as kb:
            started = time.perf_counter()
            kb.add_many(rows)
            result["ingest_s"] = round(time.perf_counter() - started, 1)
            kb.search(data.queries[0])
            result["loaded"] = footprint(store)
            for q in data.queries[1 : ASKED + 1]:
                kb.search(q, mode="vector")
            kb._asked.flush()
            kb.backend._vectors.wait()
            report = kb.optimize()
            result["optimize"] = {k: report.get(k) for k in
                                  ("codes_recall", "codes_rescore", "measured_on_asked")}
            result["after_asked_and_optimize"] = footprint(store)
        with hybridkb.open(str(store), embedder=bench) as kb:
            kb.search(data.queries[0])
        result["reopened_and_searched"] = footprint(store)
        result["vector_folder"] = sorted(p.name for p in Path(f"{store}.idx/vectors").iterdir())
    finally:
        remove_store(store)
    return result


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.footprint", description=__doc__)
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "stores")
    args = p.parse_args()
    print(json.dumps(measure(args.items, args.out, args.embedder), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
