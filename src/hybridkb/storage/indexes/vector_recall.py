"""How far a vector graph can be trusted: measured once, when its generation is built.

An HNSW graph's recall depends on the data as much as on its settings: on the benchmark's
near-duplicate-heavy items it held 0.96 recall@10 at 100k vectors with a search breadth
(ef) of 128 and 0.59 at 1M even with ef 2048 (docs/benchmarks.md). So each build asks
its own graph: pseudo-queries (the normalized midpoints of random pairs of stored vectors:
off the items like real queries, and measured no kinder than them) are answered exactly
and by the graph at rising breadths; the smallest breadth whose recall@10 reaches
RECALL_TARGET is what searches use. When none does, searches scan the base exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

RECALL_TARGET = 0.95
LADDER = (128, 256, 512, 1024, 2048)
SAMPLE = 50
K = 10
_BLOCK = 65_536  # matrix rows per exact-scan step (bounded memory at any size)


@dataclass(frozen=True, slots=True)
class Calibration:
    ef: int | None  # the breadth searches use; None: the graph cannot hold the target
    recall: float  # recall@10 measured at `ef` (or at the widest breadth tried)


def pseudo_queries(matrix: Any, n: int, seed: int = 15) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    a = np.asarray(matrix[np.sort(rng.choice(n, SAMPLE, replace=n < SAMPLE))], dtype=np.float32)
    b = np.asarray(matrix[np.sort(rng.choice(n, SAMPLE, replace=n < SAMPLE))], dtype=np.float32)
    mid = a + b
    norms = np.linalg.norm(mid, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (mid / norms).astype(np.float32)
    return out


def kth_scores(matrix: Any, queries: npt.NDArray[np.float32], k: int = K) -> npt.NDArray[np.float32]:
    """Each query's k-th best exact score, the matrix scanned in blocks (bounded memory)."""
    best = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    for start in range(0, len(matrix), _BLOCK):
        block = np.asarray(matrix[start : start + _BLOCK], dtype=np.float32)
        both = np.concatenate([best, queries @ block.T], axis=1)
        best = -np.sort(-both, axis=1)[:, :k]
    out: npt.NDArray[np.float32] = best[:, -1]
    return out


def calibrate(graph: Any, matrix: Any, keys: Any, target: float | None = None) -> Calibration:
    """The smallest breadth of LADDER at which `graph` (a usearch Index over `keys`, rows
    of `matrix`, keys ascending) finds `target` (default RECALL_TARGET) of the exact top 10
    of the pseudo-queries. A hit counts when it scores at least the exact 10th best (ties
    are equally right answers)."""
    target = RECALL_TARGET if target is None else target
    n = len(keys)
    queries = pseudo_queries(matrix, n)
    kth = kth_scores(matrix, queries)
    wanted = min(K, n)
    recall = 0.0
    for ef in LADDER:
        graph.expansion_search = ef
        found = np.asarray(graph.search(queries, K).keys, dtype=np.int64).reshape(len(queries), -1)
        hits = 0
        for q, row, bar in zip(queries, found, kth, strict=True):
            pos = np.searchsorted(keys, row[(row >= 0)])
            pos = pos[pos < n]
            scores = np.asarray(matrix[np.sort(pos)], dtype=np.float32) @ q
            hits += min(wanted, int(np.sum(scores >= bar - 1e-6)))
        recall = hits / (wanted * len(queries))
        if recall >= target:
            return Calibration(ef, round(recall, 4))
    return Calibration(None, round(recall, 4))
