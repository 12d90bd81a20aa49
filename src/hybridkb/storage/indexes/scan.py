"""Answers without the vector index: an exact scan of the vectors the store holds.

What a search falls back to when the vector base cannot answer (damaged and not yet
rebuilt, its folder unreadable): the store's own vectors read in batches, each scored on
the calling thread, only the best `limit` kept, so memory stays one batch whatever the
store's size. Exact, and as slow as reading every vector.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Protocol

import numpy as np

from .vector_base import Wanted
from .vector_batch import Batch, RowIds, Vector
from .vector_math import dot_rows


class Vectors(Protocol):
    def iter_vectors(self, dim: int, batch_size: int = 4096) -> Iterator[Batch]: ...


def exact_knn(source: Vectors, dim: int, query: Vector, limit: int, *, wanted: Wanted,
              rows: RowIds | None = None) -> list[tuple[int, float]]:
    """Top `limit` (rowid, cosine) of every stored vector the filters keep, best first,
    ties by rowid (as vector_knn.knn answers)."""
    best: list[tuple[int, float]] = []
    if limit <= 0:
        return best
    for batch in source.iter_vectors(dim):
        keep = wanted.mask(batch.corpora, batch.expires, batch.stale)
        if rows is not None:
            keep &= np.isin(batch.rowids, rows)
        if not keep.any():
            continue
        scores = dot_rows(batch.vectors[keep], query)
        ids = batch.rowids[keep]
        if scores.size > limit:
            top = np.argpartition(-scores, limit - 1)[:limit]
            ids, scores = ids[top], scores[top]
        best.extend(zip(ids.tolist(), scores.tolist(), strict=True))
        best.sort(key=itemgetter(0))
        best.sort(key=itemgetter(1), reverse=True)
        del best[limit:]
    return best
