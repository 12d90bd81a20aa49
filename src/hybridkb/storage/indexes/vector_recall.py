"""How far a first pass over the vectors can be trusted: measured once per built generation.

A graph's or a code scan's recall depends on the data as much as on its settings: on the
benchmark's near-duplicate-heavy items an HNSW graph held 0.96 recall@10 at 100k vectors
with a search breadth (ef) of 128 and 0.59 at 1M even with ef 2048 (docs/benchmarks.md).
So each build asks its own passes: queries are answered exactly and by the pass at rising
effort (the graph's breadth, the codes' rescore depth); the least effort whose recall@10
reaches RECALL_TARGET is what searches use. When none does, searches scan exactly. The
queries are the store's own once it has kept enough of them (storage/asked.py: real
queries can sit farther from the items than any pseudo-query), else pseudo-queries.

A pseudo-query is the normalized sum of PARTS random stored vectors. It must sit as far
from the items as real queries do: real MiniLM queries' best cosine to the benchmark items
is 0.59 (median), a sum of six rows' 0.62, the midpoint of two rows' (used before) 0.74.
The midpoint measured the codes far too kind at 1M (recall 1.0 rescoring 256 rows, where
real queries got 0.71) and the graph too harsh at 100k (0.80 at ef 128, real 0.95); sums of
six track real queries on both (codes at 1M: 0.72 / 0.83 / 0.91 / 0.97 rescoring
256 ... 2,048, real 0.71 / 0.82 / 0.90 / 0.96; graph at 100k: 0.86 / 0.95 / 0.97 / 0.99 at
ef 128 ... 1024, real 0.95 / 0.97 / 0.98 / 0.99).

What RECALL_TARGET gives a user: a coded base (vector_base.py) keeps int8 values and is
measured against their exact top 10, and its pseudo-queries' mean is compared as it is.
Two losses sit between that and recall against the float32 vectors a user gave, both
measured on the benchmark's items (SciFact + NFCorpus texts, their real test queries):
- int8 storage (codec.quantize) moves each row's score by about its scale over sqrt(12).
  The stored values' own exact top 10 holds 0.988 of the float32 one at 100k items
  (SciFact's queries 0.989, NFCorpus's 0.988) and 0.960 at 1M (0.965 on the benchmark's
  first 100 queries), whose 113 near-copies of each text sit closer together than that:
  no effort gets past it there. Real queries' float32 recall is about their stored recall
  times that share, at every effort.
- 50 pseudo-queries are a small sample: eight draws of 50 measured one effort (100k,
  8,192 rows scanned and 1,024 rescored) between 0.86 and 0.98, 0.926 over all 400; the
  default draw measured 0.966, so the build takes that pair (real queries: 0.959 of the
  stored top 10, 0.949 of the float32 one). At 1M the pair it takes (32,768 / 4,096)
  measured 0.950 over 400 pseudo-queries, 0.954 on the default draw: real queries get
  0.966 stored, 0.929 float32 (300 queries; 0.985 and 0.952 on the first 100).
Holding the codes to 0.96 with the mean less Z standard errors (pseudo-queries too) chose
16,384 / 2,048 at 100k (0.976 stored, 0.965 float32; the code pass 0.4 ms longer) and
65,536 / 8,192 at 1M (0.980 and 0.943 on 300 queries, 0.955 float32 on the first 100; a
hybrid search 14% slower, 12.0 -> 13.7 ms in one process, interleaved: the last run's
lead over LanceDB there was 11.8 against 13.2 ms), so it is not the rule. Neither is a
larger sample (the default draws of 200 and 500 still passed 16,384 / 512 and 8,192 / 512
at 100k; a 1M build 7 s longer at 200) nor rungs between the ladder's (more pairs, more
pass by chance).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .vector_math import as_float32, dot_rows

RECALL_TARGET = 0.95
# A sample of the store's own queries (storage/asked.py) must reach the target by this many
# standard errors of its mean (one-sided 95%): its recall is an estimate of what the next
# queries get. NFCorpus at 100k, two halves of its test queries: the probes at which one
# half measured 0.960 gave the other 0.933. Pseudo-queries are a model of the queries, not
# a sample of them, so their mean is compared with the target as it is.
Z = 1.645
LADDER = (128, 256, 512, 1024, 2048)
SAMPLE = 50
PARTS = 6  # stored vectors summed into one pseudo-query (see above)
K = 10
_BLOCK = 65_536  # matrix rows per exact-scan step (bounded memory at any size)


@dataclass(frozen=True, slots=True)
class Calibration:
    ef: int | None  # the breadth searches use; None: the graph cannot hold the target
    recall: float  # recall@10 measured at `ef` (or at the widest breadth tried)
    seconds: float = 0.0  # median time of one search at `ef` (0 when none)


@dataclass(frozen=True, slots=True)
class Probe:
    """Queries and each one's exact 10th-best score: what every first pass of a build
    (graph, codes) is measured against. `sampled`: the store's own queries (asked.py), not
    pseudo-queries."""

    queries: npt.NDArray[np.float32]
    kth: npt.NDArray[np.float32]
    sampled: bool = False


def hit_share(scores: Any, kth: float, wanted: int) -> float:
    """One query's recall: the share of the `wanted` best its answer's `scores` hold, a hit
    being any score at least the exact `kth` best (ties are equally right answers)."""
    return min(wanted, int(np.sum(np.asarray(scores) >= kth - 1e-6))) / wanted


def holds(per_query: Any, target: float, *, sampled: bool) -> bool:
    """Whether the recall of each query measured reaches `target`: their mean, less Z
    standard errors when the queries are a sample of the store's own."""
    recalls = np.asarray(per_query, dtype=np.float64)
    if recalls.size == 0:
        return True
    mean = float(recalls.mean())
    if not sampled or recalls.size < 2:
        return mean >= target
    return mean - Z * float(recalls.std(ddof=1)) / float(np.sqrt(recalls.size)) >= target


def probe(matrix: Any, n: int) -> Probe:
    queries = pseudo_queries(matrix, n)
    return Probe(queries, kth_scores(matrix, queries))


def pseudo_queries(matrix: Any, n: int, seed: int = 15, sample: int = SAMPLE) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(n, sample * PARTS, replace=n < sample * PARTS))
    rows = as_float32(matrix[picks])[rng.permutation(sample * PARTS)]
    summed = rows.reshape(sample, PARTS, -1).sum(axis=1)
    norms = np.linalg.norm(summed, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (summed / norms).astype(np.float32)
    return out


def kth_scores(matrix: Any, queries: npt.NDArray[np.float32], k: int = K) -> npt.NDArray[np.float32]:
    """Each query's k-th best exact score, the matrix scanned in blocks (bounded memory)."""
    return kth_of([best_of(queries @ as_float32(matrix[start : start + _BLOCK]).T, k)
                   for start in range(0, len(matrix), _BLOCK)], k)


def best_of(scores: npt.NDArray[np.float32], k: int = K, *, in_place: bool = False
            ) -> npt.NDArray[np.float32]:
    """The k best of each row of `scores` (queries x rows), in no order: a partition, not a
    sort (sorting 50 x 65,536 scores a block was a tenth of a 1M build); `in_place`: the
    partition reorders `scores` itself (a kept buffer) and the best are copied out."""
    if scores.shape[1] <= k:
        return scores.copy() if in_place else scores
    if in_place:
        scores.partition(scores.shape[1] - k, axis=1)
        kept: npt.NDArray[np.float32] = scores[:, -k:].copy()
        return kept
    out: npt.NDArray[np.float32] = np.partition(scores, scores.shape[1] - k, axis=1)[:, -k:]
    return out


def kth_of(parts: list[npt.NDArray[np.float32]], k: int = K) -> npt.NDArray[np.float32]:
    """Each query's k-th best score over the blocks' `best_of` (the least when fewer rows)."""
    best = np.concatenate(parts, axis=1)
    if best.shape[1] <= k:
        low: npt.NDArray[np.float32] = best.min(axis=1)
        return low
    out: npt.NDArray[np.float32] = np.partition(best, best.shape[1] - k, axis=1)[:, -k]
    return out


def calibrate(graph: Any, matrix: Any, keys: Any, target: float | None = None,
              probed: Probe | None = None) -> Calibration:
    """The smallest breadth of LADDER at which `graph` (a usearch Index over `keys`, rows
    of `matrix`, keys ascending) finds `target` (default RECALL_TARGET) of the exact top 10
    of the pseudo-queries. A hit counts when it scores at least the exact 10th best (ties
    are equally right answers)."""
    target = RECALL_TARGET if target is None else target
    n = len(keys)
    probed = probed if probed is not None else probe(matrix, n)
    wanted = min(K, n)
    recall = 0.0
    for ef in LADDER:
        graph.expansion_search = ef
        found = np.asarray(graph.search(probed.queries, K).keys, dtype=np.int64).reshape(
            len(probed.queries), -1)
        per_query = np.zeros(len(probed.queries))
        for i, (q, row, bar) in enumerate(zip(probed.queries, found, probed.kth, strict=True)):
            pos = np.searchsorted(keys, row[(row >= 0)])
            pos = pos[pos < n]
            scores = dot_rows(matrix[np.sort(pos)], q)
            per_query[i] = hit_share(scores, bar, wanted)
        recall = float(per_query.mean())
        if holds(per_query, target, sampled=probed.sampled):
            times = []
            for q in probed.queries:  # one query at a time, as searches ask
                start = time.perf_counter()
                graph.search(q, K)
                times.append(time.perf_counter() - start)
            return Calibration(ef, round(recall, 4), float(np.median(times)))
    return Calibration(None, round(recall, 4))
