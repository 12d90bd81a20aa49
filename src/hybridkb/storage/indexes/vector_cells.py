"""Cells in front of the one-bit codes: a query scans the codes of its nearest cells only.

A base with codes (vector_codes.py) is cut into about 4 x sqrt(n) cells by k-means over a
sample of its rows (the count pgvector's IVFFlat is built with, storage/postgres/ann.py):
two levels, sqrt(cells) coarse centroids, then each coarse cell's sample split again, so
assigning a million rows costs about 130 products a row, not 4,000 (about 10 s for the
whole build at 1M x 384 on one loaded core). The codes are stored cell by cell (`order`:
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
int8 stored values cap this set's recall@10 near 0.95 whatever the effort). How many rows
to scan and to rescore is measured per build on the same queries as every first pass
(vector_recall.py): of the pairs holding the target, the least work; scanning every cell
is the last rung, i.e. the whole-base scan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import vector_codes, vector_recall
from .vector_codes import FAR, Words
from .vector_math import as_float32, dot_rows
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


def cell_count(n: int) -> int:
    return max(1, round(CELLS_PER_ROOT * float(np.sqrt(n))))


def _kmeans(rows: npt.NDArray[np.float32], k: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Spherical k-means (unit centroids, nearest by dot product) from k distinct picks."""
    if len(rows) <= k:
        return rows.copy()
    centroids = rows[np.sort(rng.choice(len(rows), k, replace=False))].copy()
    for _ in range(ITERATIONS):
        nearest = np.argmax(rows @ centroids.T, axis=1)
        counts = np.bincount(nearest, minlength=k)
        grouped = np.argsort(nearest, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        filled = counts > 0
        # np.add.at over 65k rows cost seconds; a sort and reduceat costs milliseconds
        centroids[filled] = np.add.reduceat(rows[grouped], starts[filled], axis=0)
        norms = np.linalg.norm(centroids, axis=1, keepdims=True)
        centroids /= np.maximum(norms, 1e-12)
    return centroids


def build(matrix: Any, n: int, seed: int = 15) -> Cells:
    """Cells over the first `n` rows of `matrix` (unit rows; float32 or float16)."""
    total = cell_count(n)
    rng = np.random.default_rng(seed)
    size = min(n, MAX_SAMPLE, max(SAMPLE_PER_CELL * total, 1))
    picks = np.arange(n) if size >= n else np.sort(rng.choice(n, size, replace=False))
    sample = as_float32(matrix[picks]) if n else np.zeros((0, matrix.shape[1]), np.float32)
    if not n:
        return Cells(np.zeros((0, matrix.shape[1]), np.float32), np.zeros(1, np.int64),
                     np.zeros(0, np.int32))
    coarse = _kmeans(sample, max(1, round(np.sqrt(total))), rng)
    near = np.argmax(sample @ coarse.T, axis=1)
    fine = []
    for j in range(len(coarse)):
        part = sample[near == j]
        share = max(1, round(total * len(part) / len(sample)))
        fine.append(_kmeans(part, share, rng) if len(part) else coarse[j : j + 1].copy())
    first = np.concatenate([[0], np.cumsum([len(f) for f in fine])]).astype(np.int64)
    cell = np.empty(n, dtype=np.int64)
    for start in range(0, n, _BLOCK):
        block = as_float32(matrix[start : start + _BLOCK])
        near = np.argmax(block @ coarse.T, axis=1)
        for j in np.unique(near):
            members = np.flatnonzero(near == j)
            cell[start + members] = first[j] + np.argmax(block[members] @ fine[j].T, axis=1)
    centroids = np.ascontiguousarray(np.concatenate(fine), dtype=np.float32)
    order = np.argsort(cell, kind="stable").astype(np.int32)
    counts = np.bincount(cell, minlength=len(centroids))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Cells(centroids, offsets, order)


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
    hits: dict[tuple[int, int], list[float]] = {}
    for q, bar in zip(probe.queries, probe.kth, strict=True):
        whole = vector_codes.distances(codes, vector_codes.encode(q, center))
        order = ranked(cells, q)
        ends = np.cumsum(cells.sizes[order])
        where = _spans(cells, order)  # every code, best cells first
        ranked_dist = whole[where]
        for budget in budgets:
            scanned = n if budget >= n else int(ends[int(np.searchsorted(ends, budget))])
            found = 0.0
            for rescore in rungs[budget]:
                if found < 1.0:  # a deeper rung's picks hold a shallower one's
                    picks = np.sort(cells.order[where[vector_codes.closest(ranked_dist[:scanned], rescore)]])
                    found = vector_recall.hit_share(dot_rows(matrix[picks], q), bar, wanted)
                hits.setdefault((budget, rescore), []).append(found)
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
