"""Cells in front of the one-bit codes: a query scans the codes of its nearest cells only.

A base with codes (vector_codes.py) is cut into about 4 x sqrt(n) cells by k-means over a
sample of its rows (the count pgvector's IVFFlat is built with, storage/postgres/ann.py):
two levels, sqrt(cells) coarse centroids, then each coarse cell's sample split again, so
assigning a million rows costs about 130 products a row, not 4,000 (the assignment is part
of the build's one pass over the rows, vector_sweep.py). The codes are stored cell by cell (`order`:
the base position of each code, `offsets`: where each cell's codes begin), so a query
scores the cell centroids, takes cells best first until it has scanned `budget` rows (of
the rows its filter keeps), and picks the `rescore` rows nearest by code among them for the
matrix's rescore, as a whole-base code scan does.

Why it helps beyond speed: near-duplicates land in one cell, and the rows of far cells no
longer compete for the rescore by Hamming distance, whose ranking is coarse. On the
benchmark's million items (8,800 documents, ~113 perturbed copies each, 4,002 cells), the
build's pseudo-queries chose 65,536 rows scanned and 4,096 rescored; on 300 real queries
that gave recall@10 0.934 and the 300-deep list 0.934 against numpy's float32 top 10,
where the whole-base scan rescoring 4,096 gave 0.931 and 0.921, for half its CPU (5.0
against 10.0 ms a search; with float16 stored vectors the same pair gave 0.972 and 0.940:
int8 stored values cap this set's recall@10 against float32 at 0.96 whatever the effort:
vector_recall.py). The pair moves
with the cells' k-means: built from the stored values themselves rather than their float16
rounding, the same items chose 32,768 and 4,096 (both measured 0.954 on the pseudo-queries;
on the real queries 0.965 against 0.974 of the exact top 10 of the stored values, 2.9
against 3.8 ms a search). How many rows to scan and to rescore is measured per build on
the same queries as every first pass (vector_recall.py): of the pairs holding the target,
the least work; scanning every cell is the last rung, i.e. the whole-base scan.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import vector_codes, vector_recall
from .vector_codes import FAR, Words
from .vector_math import as_float32, dot_exact, dot_rows
from .vector_recall import K, Probe

Positions = npt.NDArray[np.int64]
CELLS_PER_ROOT = 4  # cells = 4 x sqrt(rows), as pgvector's IVFFlat lists
SAMPLE_PER_CELL = 16  # k-means sample: 16 rows a cell (65,536 at 1M rows), at most MAX_SAMPLE
MAX_SAMPLE = 65_536
ITERATIONS = 8  # Lloyd rounds at each level (the cells need not be optimal, only coherent)
_BLOCK = 65_536  # rows assigned at a time
# Rows scanned per query, tried at each build with every rung of the rescore ladder; the
# base's size is the last rung (every cell: a whole-base code scan).
BUDGET_LADDER = (1_024, 2_048, 4_096, 8_192, 16_384, 32_768, 65_536, 131_072, 262_144)
RESCORE_WEIGHT = 16  # a rescored row's cost in codes scanned (work())
_PARALLEL_ROWS = 100_000  # calibrate(): below, one thread (threads cost more than they save)


@dataclass(frozen=True, slots=True)
class Cells:
    """Centroids (cells, dim), where each cell's codes begin (cells + 1) and the base
    position of each code in cell order (n)."""

    centroids: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.int64]
    order: npt.NDArray[np.int32]

    @property
    def sizes(self) -> npt.NDArray[np.int64]:
        out: npt.NDArray[np.int64] = np.diff(self.offsets)
        return out

    def __len__(self) -> int:
        return len(self.order)

    def kept(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """How many rows of each cell `mask` (over base positions) keeps."""
        if not len(self.order):
            return np.zeros(len(self.centroids), dtype=np.int64)
        flags = mask[self.order].astype(np.int64)
        starts = self.offsets[:-1]
        out = np.zeros(len(starts), dtype=np.int64)
        full = starts < len(flags)
        summed = np.add.reduceat(flags, starts[full])
        out[full] = summed
        out[self.sizes == 0] = 0  # reduceat gives an empty cell its next cell's first row
        return out


@dataclass(frozen=True, slots=True)
class CellCalibration:
    budget: int | None  # rows scanned per query (None: no pair reached the target)
    rescore: int | None  # rows rescored per query
    recall: float  # recall@10 at the pair (or the best measured)
    seconds: float  # median time of one search at the pair (0 when none)


def threads(*, blas: bool) -> int:
    """Threads a build's numpy-heavy steps use: two where there are two cores (numpy
    releases the GIL), but for matrix products (`blas`) only where OpenBLAS is held to one
    thread of its own (OPENBLAS_NUM_THREADS=1, as the benchmark runs): products from two
    threads into OpenBLAS's own pool ran 6x slower, and kept it slow for the process
    (300k rows' sweep: 0.8 s on one thread, then 4.8 s on two, 4.7 s on one again)."""
    if (os.cpu_count() or 1) < 2:
        return 1
    if not blas:
        return 2
    held = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    return 2 if held == "1" else 1


def cell_count(n: int) -> int:
    return max(1, round(CELLS_PER_ROOT * float(np.sqrt(n))))


def _seeds(n: int, k: int, rng: np.random.Generator) -> npt.NDArray[np.int64] | None:
    """k distinct starting rows of n, ascending (None: n <= k, every row is a centroid)."""
    return None if n <= k else np.sort(rng.choice(n, k, replace=False))


def _kmeans(rows: npt.NDArray[np.float32], k: int, seeds: npt.NDArray[np.int64] | None
            ) -> npt.NDArray[np.float32]:
    """Spherical k-means (unit centroids, nearest by dot product) from the rows at `seeds`."""
    if seeds is None:
        return rows.copy()
    centroids = rows[seeds].copy()
    members = np.zeros((k, len(rows)), dtype=np.float32)
    scores = np.empty((len(rows), k), dtype=np.float32)  # kept: fresh pages cost (vector_math)
    every = np.arange(len(rows))
    for _ in range(ITERATIONS):
        nearest = np.argmax(np.matmul(rows, centroids.T, out=scores), axis=1)
        filled = np.bincount(nearest, minlength=k) > 0
        # each cell's sum as one product with its members' indicator rows: a reduceat over
        # the rows grouped by cell cost 10x as much (65,536 x 384 rows, 63 cells: 90 ms a round)
        members[nearest, every] = 1.0
        centroids[filled] = (members @ rows)[filled]
        members[nearest, every] = 0.0
        norms = np.linalg.norm(centroids, axis=1, keepdims=True)
        centroids /= np.maximum(norms, 1e-12)
    return centroids


@dataclass(frozen=True, slots=True)
class Trained:
    """Two-level centroids from a sample: coarse (c, dim) and each coarse cell's fine ones,
    numbered together from `first[j]` (fine cell ids: first[j] + index in fine[j])."""

    coarse: npt.NDArray[np.float32]
    fine: list[npt.NDArray[np.float32]]
    first: npt.NDArray[np.int64]

    @property
    def centroids(self) -> npt.NDArray[np.float32]:
        out: npt.NDArray[np.float32] = np.ascontiguousarray(np.concatenate(self.fine), dtype=np.float32)
        return out


def train(matrix: Any, n: int, seed: int = 15) -> Trained | None:
    """The cells' centroids, k-means over a sample of the first `n` rows (None: no rows)."""
    if not n:
        return None
    total = cell_count(n)
    rng = np.random.default_rng(seed)
    size = min(n, MAX_SAMPLE, max(SAMPLE_PER_CELL * total, 1))
    picks = np.arange(n) if size >= n else np.sort(rng.choice(n, size, replace=False))
    sample = as_float32(matrix[picks])
    wanted = max(1, round(np.sqrt(total)))
    coarse = _kmeans(sample, wanted, _seeds(len(sample), wanted, rng))
    near = np.argmax(sample @ coarse.T, axis=1)
    parts = [sample[near == j] for j in range(len(coarse))]
    shares = [max(1, round(total * len(part) / len(sample))) for part in parts]
    seeds = [_seeds(len(part), share, rng) for part, share in zip(parts, shares, strict=True)]
    # each coarse cell split on its own, the seeds drawn first in order (the same cells on
    # any number of threads): two threads halve the ~60 small k-means at 1M
    with ThreadPoolExecutor(threads(blas=True), thread_name_prefix="hybridkb-cells") as pool:
        fine = list(pool.map(lambda j: _kmeans(parts[j], shares[j], seeds[j]) if len(parts[j])
                             else coarse[j : j + 1].copy(), range(len(coarse))))
    first = np.concatenate([[0], np.cumsum([len(f) for f in fine])]).astype(np.int64)
    return Trained(coarse, fine, first)


def assign(block: npt.NDArray[np.float32], trained: Trained,
           scores: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.int64]:
    """Each row's cell: its nearest coarse centroid's nearest fine one. The rows are grouped
    by coarse cell with one stable argsort (a 16-bit key: a radix sort), not a scan of the
    block per coarse cell. `scores`: a kept buffer of at least len(block) x coarse floats."""
    out_scores = None if scores is None else \
        scores[: len(block) * len(trained.coarse)].reshape(len(block), len(trained.coarse))
    near = np.argmax(np.matmul(block, trained.coarse.T, out=out_scores), axis=1)
    out = np.empty(len(block), dtype=np.int64)
    grouped = _grouped(near, len(trained.coarse))
    bounds = np.searchsorted(near[grouped], np.arange(len(trained.coarse) + 1))
    for j in np.flatnonzero(np.diff(bounds)):
        members = grouped[bounds[j] : bounds[j + 1]]
        out[members] = trained.first[j] + np.argmax(block[members] @ trained.fine[j].T, axis=1)
    return out


def _grouped(labels: npt.NDArray[np.int64], count: int) -> npt.NDArray[np.intp]:
    """Positions of `labels` (each below `count`) grouped by label, in their order within a
    label: a stable argsort, on a 16-bit key where the labels fit one (numpy's radix sort)."""
    return np.argsort(labels.astype(np.uint16) if count <= 65_536 else labels, kind="stable")


def from_assigned(trained: Trained | None, cell: npt.NDArray[np.int64], dim: int) -> Cells:
    """Cells from each row's cell id: the rows placed cell by cell, in base order within a
    cell (a counting sort: a 16-bit key's stable argsort is numpy's radix sort)."""
    if trained is None:
        return Cells(np.zeros((0, dim), np.float32), np.zeros(1, np.int64), np.zeros(0, np.int32))
    centroids = trained.centroids
    order = _grouped(cell, len(centroids)).astype(np.int32)
    counts = np.bincount(cell, minlength=len(centroids))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Cells(centroids, offsets, order)


def build(matrix: Any, n: int, seed: int = 15) -> Cells:
    """Cells over the first `n` rows of `matrix` (unit rows; float32, float16 or ScaledRows)."""
    trained = train(matrix, n, seed)
    cell = np.empty(n, dtype=np.int64)
    if trained is not None:
        for start in range(0, n, _BLOCK):
            cell[start : start + _BLOCK] = assign(as_float32(matrix[start : min(n, start + _BLOCK)]), trained)
    return from_assigned(trained, cell, matrix.shape[1])


def permute(columns: Words, cells: Cells) -> Words:
    """Column-major codes (words, n) in base order -> in cell order."""
    out: Words = np.ascontiguousarray(columns[:, cells.order])
    return out


def ranked(cells: Cells, query: Any) -> npt.NDArray[np.int64]:
    """Cells by centroid score, best first."""
    scores = dot_rows(cells.centroids, query)  # on this thread: never BLAS's pool (vector_math)
    out: npt.NDArray[np.int64] = np.argsort(-scores, kind="stable")
    return out


def _spans(cells: Cells, chosen: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Code positions (cell order) of the `chosen` cells' rows, cell after cell."""
    lengths = cells.sizes[chosen]
    total = int(lengths.sum())
    shift = cells.offsets[chosen] - np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out: npt.NDArray[np.int64] = np.repeat(shift, lengths) + np.arange(total, dtype=np.int64)
    return out


def _best(cells: Cells, query: Any, budget: int, kept: npt.NDArray[np.int64] | None
          ) -> npt.NDArray[np.int64]:
    """The best cells until `budget` rows (of those `kept` counts per cell) are in."""
    order = ranked(cells, query)
    counts = (cells.sizes if kept is None else kept)[order]
    upto = int(np.searchsorted(np.cumsum(counts), budget)) + 1
    return order[:upto]


def probed(cells: Cells, query: Any, budget: int, kept: npt.NDArray[np.int64] | None = None
           ) -> npt.NDArray[np.int64]:
    """Code positions of the best cells until `budget` rows (of those `kept` counts per cell)
    are in."""
    return _spans(cells, _best(cells, query, budget, kept))


def _runs(cells: Cells, chosen: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """The chosen cells' code ranges in cell order, neighbours merged: ~160 runs for 225
    cells at 1M (the cells of one coarse centroid are numbered together)."""
    picked = np.sort(chosen)
    runs: list[tuple[int, int]] = []
    for start, stop in zip(cells.offsets[picked].tolist(), cells.offsets[picked + 1].tolist(), strict=True):
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], stop)
        elif stop > start:
            runs.append((start, stop))
    return runs


def candidates(cells: Cells, codes: Words, center: npt.NDArray[np.float32], query: Any,
               budget: int, rescore: int, mask: npt.NDArray[np.bool_] | None = None,
               kept: npt.NDArray[np.int64] | None = None) -> Positions:
    """Base positions (ascending) of the `rescore` rows nearest by code among the rows of
    the query's best cells, `budget` rows scanned (only rows `mask` keeps; `kept`: how many
    each cell has, Cells.kept, to count the budget in them). A budget of the whole base is
    the whole-base scan."""
    code = vector_codes.encode(query, center)
    if budget >= len(cells):
        dist = vector_codes.distances(codes, code)
        rows: Any = cells.order
    else:
        # the runs' codes copied whole, then one XOR and count over them: 0.8 against
        # 1.4 ms of CPU for 65,536 rows gathered word by word by position
        runs = _runs(cells, _best(cells, query, budget, kept))
        if not runs:
            return np.zeros(0, dtype=np.int64)
        block = np.concatenate([codes[:, a:b] for a, b in runs], axis=1)
        np.bitwise_xor(block, code.reshape(-1)[:, None], out=block)
        ones = np.bitwise_count(block)
        dist = ones[0].astype(np.uint16)
        for j in range(1, len(ones)):
            dist += ones[j]
        rows = np.concatenate([cells.order[a:b] for a, b in runs])
    if mask is not None:
        allowed = mask[rows]
        dist |= (~allowed).astype(np.uint16) * FAR
        rescore = min(rescore, int(np.count_nonzero(allowed)))
    picks = vector_codes.closest(dist, rescore)
    out: Positions = np.sort(rows[picks].astype(np.int64))
    return out


def effort(budget: int, rescore: int, count: int) -> tuple[int, int]:
    """The pair a search of `count` rows uses: at least 4 x count rescored (hybrid's 300-deep
    list), the rows scanned grown in proportion. Never more rows scanned for the same
    rescore: far rows only compete by Hamming distance (SciFact with hashed vectors: the
    measured 4,096 of 4,096 held recall@10 0.99, 4,096 of the whole 5,183 0.89)."""
    wanted = max(rescore, 4 * count)
    return (budget if wanted == rescore else -(-budget * wanted // rescore)), wanted


def search(cells: Cells, codes: Words, center: npt.NDArray[np.float32], matrix: Any, query: Any,
           budget: int, rescore: int, mask: npt.NDArray[np.bool_] | None = None,
           kept: npt.NDArray[np.int64] | None = None) -> tuple[Positions, npt.NDArray[np.float32]]:
    """`candidates` and their scores on `matrix`."""
    picks = candidates(cells, codes, center, query, budget, rescore, mask, kept)
    return picks, dot_rows(matrix, query, picks)


def calibrate(cells: Cells, codes: Words, center: npt.NDArray[np.float32], matrix: Any,
              probe: Probe, target: float | None = None) -> CellCalibration:
    """Every rung of BUDGET_LADDER (and the whole base) with every rung of the rescore
    ladder below it: of the pairs whose recall@10 reaches `target`, the least `work`
    (the least rescore at each budget), and its median time."""
    target = vector_recall.RECALL_TARGET if target is None else target
    n = len(cells)
    wanted = min(K, n)
    budgets = [b for b in BUDGET_LADDER if b < n] + [n]
    # the rescore rungs under each budget, then the budget itself (every row scanned) while
    # the ladder reaches it, as the whole-base scan's last rung is the whole base
    ladder = vector_codes.RESCORE_LADDER
    rungs = {b: [r for r in ladder if r < b] + ([b] if b <= ladder[-1] else []) for b in budgets}

    def measured(queries: range) -> dict[tuple[int, int], list[float]]:
        hits: dict[tuple[int, int], list[float]] = {}
        # a row's score is scored once per query: the rungs and budgets pick mostly the same
        # rows, and scoring them again was most of this measurement (a row's product is
        # the same whichever rows it is scored with: vector_math.dot_exact)
        scored = np.zeros(n, dtype=bool)
        score = np.empty(n, dtype=np.float32)
        for i in queries:
            q, bar = probe.queries[i], probe.kth[i]
            whole = vector_codes.distances(codes, vector_codes.encode(q, center), parallel=False)
            order = ranked(cells, q)
            ends = np.cumsum(cells.sizes[order])
            where = _spans(cells, order)  # every code, best cells first
            ranked_dist = whole[where]
            touched = []
            for budget in budgets:
                scanned = n if budget >= n else int(ends[int(np.searchsorted(ends, budget))])
                found = 0.0
                for rescore in rungs[budget]:
                    if found < 1.0:  # a deeper rung's picks hold a shallower one's
                        near = vector_codes.closest(ranked_dist[:scanned], rescore)
                        picks = np.sort(cells.order[where[near]])
                        new = picks[~scored[picks]]
                        score[new] = dot_exact(matrix, q, new)
                        scored[new] = True
                        touched.append(new)
                        found = vector_recall.hit_share(score[picks], bar, wanted)
                    hits.setdefault((budget, rescore), []).append(found)
            for rows in touched:
                scored[rows] = False
        return hits

    # the queries in two halves on two threads, their recalls joined in query order
    # (no matrix products: never OpenBLAS)
    half = (len(probe.queries) + 1) // 2 if threads(blas=False) > 1 and n >= _PARALLEL_ROWS \
        else len(probe.queries)
    with ThreadPoolExecutor(2, thread_name_prefix="hybridkb-cells") as pool:
        first, second = pool.map(measured, (range(half), range(half, len(probe.queries))))
    hits = {pair: first.get(pair, []) + second.get(pair, []) for pair in first.keys() | second.keys()}
    holding: dict[int, int] = {}
    for (budget, rescore), per_query in sorted(hits.items()):
        if budget not in holding and vector_recall.holds(per_query, target, sampled=probe.sampled):
            holding[budget] = rescore
    if not holding:
        best = max(hits.items(), key=lambda item: float(np.mean(item[1])))
        return CellCalibration(None, None, round(float(np.mean(best[1])), 4), 0.0)
    budget, rescore = min(holding.items(), key=lambda pair: work(*pair))
    return CellCalibration(budget, rescore, round(float(np.mean(hits[(budget, rescore)])), 4),
                           _timed(cells, codes, center, matrix, probe, budget, rescore))


def work(budget: int, rescore: int) -> int:
    """A pair's cost in codes scanned: a rescored row reads 8 times a code's bytes (int8 at
    384 dimensions), gathered, and costs about 16 codes' time (1M rows: a code scan 12 ms
    on one core, rescoring 4,096 rows 0.65 ms). A model, not a timing: on a loaded machine
    the timings of two pairs a few milliseconds apart were noise (the whole-base scan
    measured faster than a sixteenth of it, load 7 on 2 cores)."""
    return budget + RESCORE_WEIGHT * rescore


def _timed(cells: Cells, codes: Words, center: npt.NDArray[np.float32], matrix: Any, probe: Probe,
           budget: int, rescore: int) -> float:
    times = []
    for q in probe.queries:
        start = time.perf_counter()
        search(cells, codes, center, matrix, q, budget, rescore)
        times.append(time.perf_counter() - start)
    return float(np.median(times))
