"""One bit per dimension: a first pass that reads 8x fewer bytes than the int8 matrix.

Each stored vector is kept, beside its row of the matrix, as the signs of its components
after subtracting the base's mean vector (centering splits each dimension near its median,
so every bit carries information). The Hamming distance between two such codes tracks
the angle between the vectors, so the `rescore` rows nearest by code hold the true
nearest neighbours with high probability; those rows are then scored on the matrix
(int8 with a scale per row, vector_math.py), and the best of them exactly on the stored
vectors (vector_knn.knn), so the answer's scores are exact.

Why not the graph alone: on the benchmark's near-duplicate-heavy million items no HNSW
breadth reached recall@10 0.95 (0.68 at ef 2048), and the exact scan it fell back to took
187 ms. Measured on those items (200 test queries, numpy 2, one core; docs/benchmarks.md):
a code scan of 1M rows takes 12 ms (faiss' IndexBinaryFlat: the same 12 ms, so no new
dependency) and rescoring the 4,000 nearest by code gives recall@10 0.98; at 100k,
rescoring 512 gives 0.98 in about 1.5 ms. How many rows to rescore is measured per build,
like the graph's breadth (vector_recall.py), on the same pseudo-queries.

Codes are stored column-major (one contiguous uint64 array per 64 dimensions), so the scan
is a few whole-array XOR/popcount passes; numpy has no fast reduction over a short row.
Since format 6 they are kept cell by cell (vector_cells.py): a query scans the codes of
its nearest cells only, and this whole-base scan is the last rung of that measurement.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..workers import Workers
from . import vector_recall
from .vector_math import as_float32, dot_exact, dot_rows
from .vector_recall import K, Probe

Words = npt.NDArray[np.uint64]
# Rows rescored exactly per query, tried in order at each build; the first to reach the
# target recall is used. The last is a ceiling: past it an exact scan costs about as much.
RESCORE_LADDER = (256, 512, 1024, 2048, 4096, 8192, 16384)
CENTER_SAMPLE = 65_536  # rows whose mean centers the codes
_BLOCK = 65_536
FAR = np.uint16(65_535)  # distance given to rows a filter drops
PARALLEL_ROWS = 262_144  # below, one thread: handing half to another costs more than it saves
SPAN = 65_536  # rows a scan takes at a time (a 512 KB XOR buffer: 1M rows 16.5 -> 10.8 ms, one thread)
_SAMPLE_STEP, _SAMPLE_MIN = 16, 4_096  # closest(): every 16th distance bounds the cut, past 65,536


@dataclass(frozen=True, slots=True)
class CodeCalibration:
    rescore: int | None  # rows rescored per query; None: no rung reached the target
    recall: float  # recall@10 at `rescore` (or at the widest rung tried)
    seconds: float  # median time of one search at `rescore` (0 when none)


def words_per_code(dim: int) -> int:
    return (dim + 63) // 64


def center_of(matrix: Any, n: int, seed: int = 15) -> npt.NDArray[np.float32]:
    """Mean of up to CENTER_SAMPLE rows of `matrix` (sorted picks: a memory map reads
    pages in order)."""
    if n <= CENTER_SAMPLE:
        picks = np.arange(n)
    else:
        picks = np.sort(np.random.default_rng(seed).choice(n, CENTER_SAMPLE, replace=False))
    rows = as_float32(matrix[picks])
    out: npt.NDArray[np.float32] = rows.mean(axis=0).astype(np.float32)
    return out


def encode(vectors: Any, center: npt.NDArray[np.float32], above: npt.NDArray[np.bool_] | None = None
           ) -> Words:
    """Row-major codes: (rows, words) uint64, bit set where a component exceeds the center
    (`above`: a kept buffer of at least the block's shape for the comparison)."""
    block = np.atleast_2d(as_float32(vectors))
    greater = np.greater(block, center, out=None if above is None else above[: len(block)])
    bits = np.packbits(greater, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    out: Words = np.ascontiguousarray(bits).view(np.uint64)
    return out


def encode_columns(matrix: Any, n: int, center: npt.NDArray[np.float32]) -> Words:
    """Column-major codes of the first `n` rows of `matrix`: (words, n), built in blocks."""
    dim = int(center.shape[0])
    out: Words = np.empty((words_per_code(dim), n), dtype=np.uint64)
    for start in range(0, n, _BLOCK):
        stop = min(n, start + _BLOCK)
        out[:, start:stop] = encode(matrix[start:stop], center).T
    return out


def distances(columns: Words, query_code: Words, *, parallel: bool = True) -> npt.NDArray[np.uint16]:
    """Hamming distance of the query's code (one row of `encode`) to every stored code.
    Past PARALLEL_ROWS the rows are split over two threads (numpy releases the GIL):
    1M rows 8-12 -> 5.6 ms on an idle 2-core machine (not `parallel`: a caller's own
    threads already use both cores)."""
    code = query_code.reshape(-1)
    n = columns.shape[1]
    out: npt.NDArray[np.uint16] = np.empty(n, dtype=np.uint16)
    if not parallel or n < PARALLEL_ROWS or (os.cpu_count() or 1) < 2:
        _distances_into(columns, code, out, 0, n)
        return out
    half = n // 2
    other = _workers.pool().submit(_distances_into, columns, code, out, 0, half)
    _distances_into(columns, code, out, half, n)
    other.result()
    return out


def _distances_into(columns: Words, code: Words, out: npt.NDArray[np.uint16], start: int, stop: int
                    ) -> None:
    """Rows start..stop, SPAN at a time: each XOR and count stays in the core's cache
    (whole-column passes wrote and read back an 8 MB temporary per word at 1M rows)."""
    xor = np.empty(min(SPAN, stop - start), dtype=np.uint64)
    ones = np.empty(len(xor), dtype=np.uint8)
    for lo in range(start, stop, SPAN):
        hi = min(stop, lo + SPAN)
        x, c, acc = xor[: hi - lo], ones[: hi - lo], out[lo:hi]
        np.bitwise_xor(columns[0, lo:hi], code[0], out=x)
        np.bitwise_count(x, out=c)
        acc[:] = c
        for j in range(1, len(columns)):
            np.bitwise_xor(columns[j, lo:hi], code[j], out=x)
            np.bitwise_count(x, out=c)
            np.add(acc, c, out=acc)


_workers = Workers(1, "hybridkb-codes")


def closest(dist: npt.NDArray[np.uint16], count: int) -> npt.NDArray[np.int64]:
    """Positions of the `count` smallest distances, ascending by position; ties at the
    cut go to the lower positions. Distances are small integers, so a histogram finds the
    cut; on long arrays the histogram of a strided sample first bounds it from above
    (a full bincount was half the time of this at 1M rows), and only the rows under that
    bound are counted."""
    if count >= dist.size:
        return np.arange(dist.size, dtype=np.int64)
    within = None
    if dist.size >= _SAMPLE_STEP * _SAMPLE_MIN:
        sample = np.cumsum(np.bincount(dist[::_SAMPLE_STEP]))
        bound = int(np.searchsorted(sample, 2 * count / _SAMPLE_STEP + 64))
        within = np.flatnonzero(dist <= bound)
        if within.size < count:  # the sample misled: count every row
            within = None
    below = dist if within is None else dist[within]
    cumulative = np.cumsum(np.bincount(below))
    cut = int(np.searchsorted(cumulative, count))
    keep = below <= cut
    allowed = count - (int(cumulative[cut - 1]) if cut else 0)
    keep[np.flatnonzero(below == cut)[allowed:]] = False  # the later ties at the cut
    picked = np.flatnonzero(keep)
    out: npt.NDArray[np.int64] = picked if within is None else within[picked]
    return out.astype(np.int64, copy=False)


def search(columns: Words, center: npt.NDArray[np.float32], matrix: Any, query: Any, rescore: int,
           mask: npt.NDArray[np.bool_] | None = None
           ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Positions of the `rescore` rows nearest by code (only rows `mask` keeps) and their
    exact scores on `matrix`."""
    dist = distances(columns, encode(query, center))
    if mask is not None:
        # arithmetic, not `dist[~mask] = FAR`: boolean-index assignment took 8 ms at 1M rows
        dist |= (~mask).astype(np.uint16) * FAR
        rescore = min(rescore, int(np.count_nonzero(mask)))
    picks = closest(dist, rescore)
    scores = dot_rows(matrix, query, picks)
    return picks, scores


def calibrate(columns: Words, center: npt.NDArray[np.float32], matrix: Any, probe: Probe,
              target: float | None = None) -> CodeCalibration:
    """The smallest rung of RESCORE_LADDER at which the code pass finds `target` (default
    vector_recall.RECALL_TARGET) of the pseudo-queries' exact top 10 (a hit scores at least the 10th)."""
    target = vector_recall.RECALL_TARGET if target is None else target
    n = columns.shape[1]
    wanted = min(K, n)
    rungs = [r for r in RESCORE_LADDER if r < n] + [n] if n <= RESCORE_LADDER[-1] else \
        list(RESCORE_LADDER)
    hits = np.zeros((len(rungs), len(probe.queries)))
    for j, (q, bar) in enumerate(zip(probe.queries, probe.kth, strict=True)):
        dist = distances(columns, encode(q, center))
        for i, rescore in enumerate(rungs):
            picks = closest(dist, rescore)
            scores = dot_exact(matrix, q, picks)
            hits[i, j] = vector_recall.hit_share(scores, bar, wanted)
            if hits[i, j] >= 1.0:
                # A deeper rung's picks hold this one's (closest keeps the nearer rows and
                # the lower-position ties): it finds them all too, and gathering its rows
                # from the matrix was most of a build's measurement.
                hits[i + 1:, j] = 1.0
                break
    for rescore, per_query in zip(rungs, hits, strict=True):
        if vector_recall.holds(per_query, target, sampled=probe.sampled):
            return CodeCalibration(rescore, round(float(per_query.mean()), 4),
                                   _timed(columns, center, matrix, probe, rescore))
    return CodeCalibration(None, round(float(hits[-1].mean()), 4), 0.0)


def _timed(columns: Words, center: npt.NDArray[np.float32], matrix: Any, probe: Probe,
           rescore: int) -> float:
    times = []
    for q in probe.queries:
        start = time.perf_counter()
        search(columns, center, matrix, q, rescore)
        times.append(time.perf_counter() - start)
    return float(np.median(times))
