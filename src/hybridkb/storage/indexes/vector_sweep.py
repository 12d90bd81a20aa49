"""One pass over a base's rows for everything a build computes row by row, on two threads.

Once its samples are taken (the codes' centre, the cells' centroids, the measuring queries),
a coded base's build needs three things of every row: its cell (vector_cells.assign), its
one-bit code (vector_codes.encode) and its products with the queries, whose best give each
query's exact 10th-best score (vector_recall.best_of). They are made here from one float32
block of the rows at a time (for an int8 base, its codes times their scale: the stored
values exactly, vector_math.ScaledRows), each block made once for all three. Blocks go to
two threads where OpenBLAS is held to one thread (OPENBLAS_NUM_THREADS=1, as the benchmark
runs): numpy's products, comparisons and partitions release the GIL, so explicit threads are
how a build uses both cores there (elsewhere OpenBLAS's own pool runs the products:
vector_cells.threads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import vector_cells, vector_codes, vector_recall
from .vector_math import rows_into

BLOCK = 32_768  # rows a thread takes at a time (48 MB of float32 at 384 dimensions)


@dataclass(frozen=True, slots=True)
class Swept:
    cell: npt.NDArray[np.int64]  # each row's cell (empty without trained cells)
    columns: vector_codes.Words  # column-major codes (words, n)
    kth: npt.NDArray[np.float32] | None  # each query's exact k-th best score (None: no queries)


def sweep(matrix: Any, n: int, center: npt.NDArray[np.float32],
          trained: vector_cells.Trained | None, queries: npt.NDArray[np.float32] | None,
          *, cancelled: Callable[[], bool] = lambda: False, workers: int | None = None) -> Swept:
    """The cells, codes and queries' k-th best scores of the first `n` rows of `matrix`
    (float32, float16 or ScaledRows rows). Stops early, its results unfinished, once
    `cancelled` says so: the caller asks it again."""
    dim = int(center.shape[0])
    cell = np.empty(n if trained is not None else 0, dtype=np.int64)
    columns: vector_codes.Words = np.empty((vector_codes.words_per_code(dim), n), dtype=np.uint64)
    starts = list(range(0, n, BLOCK))
    parts: list[npt.NDArray[np.float32] | None] = [None] * len(starts)
    kept = threading.local()  # each thread's buffers, kept across its blocks (vector_math.rows_into)

    def one(i: int) -> None:
        if cancelled():
            return
        if not hasattr(kept, "rows"):
            kept.rows = np.empty((min(n, BLOCK), dim), dtype=np.float32)
            kept.above = np.empty((min(n, BLOCK), dim), dtype=bool)
            kept.scores = np.empty(min(n, BLOCK) * max(len(queries) if queries is not None else 0,
                                                      len(trained.coarse) if trained is not None else 0),
                                   dtype=np.float32)
        start = starts[i]
        stop = min(n, start + BLOCK)
        rows = rows_into(matrix, start, stop, kept.rows)
        if trained is not None:
            cell[start:stop] = vector_cells.assign(rows, trained, kept.scores)
        columns[:, start:stop] = vector_codes.encode(rows, center, kept.above).T
        if queries is not None:
            scores = kept.scores[: len(queries) * len(rows)].reshape(len(queries), len(rows))
            parts[i] = vector_recall.best_of(np.matmul(queries, rows.T, out=scores), in_place=True)

    count = workers or vector_cells.threads(blas=True)
    if count < 2 or len(starts) < 2:
        for i in range(len(starts)):
            one(i)
    else:
        with ThreadPoolExecutor(count, thread_name_prefix="hybridkb-sweep") as pool:
            list(pool.map(one, range(len(starts))))
    kth = None
    if queries is not None and not cancelled():
        found = [p for p in parts if p is not None]
        kth = vector_recall.kth_of(found) if found else np.full(len(queries), -np.inf, np.float32)
    return Swept(cell, columns, kth)
