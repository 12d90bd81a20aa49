"""An exact in-memory cosine index beside the database, rebuilt from it.

The database holds the vectors (the source of truth, written in the same
transaction as the item). This matrix is a cache: a matrix product over all
rows is several times faster than sqlite-vec's brute-force scan, and exact.
Filters that only need corpus, expiry and staleness are masks here; anything
else arrives as an explicit set of allowed row ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..codec import Vector


class VectorIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._rowids = np.zeros(0, dtype=np.int64)
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._corpus = np.zeros(0, dtype=np.int32)
        self._expires = np.zeros(0, dtype=np.float64)
        self._stale = np.zeros(0, dtype=bool)
        self._alive = np.zeros(0, dtype=bool)
        self._pos: dict[int, int] = {}
        self._corpus_codes: dict[str, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return int(self._alive[: self._size].sum())

    def _code(self, corpus: str) -> int:
        return self._corpus_codes.setdefault(corpus, len(self._corpus_codes))

    def _grow(self, extra: int) -> None:
        need = self._size + extra
        if need <= len(self._rowids):
            return
        cap = max(need, int(len(self._rowids) * 1.5) + 64)

        def grow(a: Any, fill: object) -> Any:
            out = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
            out[: self._size] = a[: self._size]
            return out

        self._rowids = grow(self._rowids, -1)
        self._matrix = grow(self._matrix, 0.0)
        self._corpus = grow(self._corpus, -1)
        self._expires = grow(self._expires, np.inf)
        self._stale = grow(self._stale, False)
        self._alive = grow(self._alive, False)

    def upsert(
        self, rowids: Sequence[int], vectors: Sequence[Vector], corpora: Sequence[str],
        expires: Sequence[float | None], stale: Sequence[bool],
    ) -> None:
        self._grow(len(rowids))
        for rowid, vec, corpus, exp, st in zip(rowids, vectors, corpora, expires, stale, strict=True):
            pos = self._pos.get(rowid)
            if pos is None:
                pos = self._size
                self._size += 1
                self._pos[rowid] = pos
                self._rowids[pos] = rowid
            self._matrix[pos] = vec
            self._corpus[pos] = self._code(corpus)
            self._expires[pos] = np.inf if exp is None else exp
            self._stale[pos] = st
            self._alive[pos] = True

    def load(
        self, rowids: Sequence[int], matrix: npt.NDArray[np.float32], corpora: Sequence[str],
        expires: Sequence[float | None], stale: Sequence[bool],
    ) -> None:
        """Fill an empty index in one go (a rebuild from the database): arrays are built
        whole instead of row by row, which `upsert` would do at several µs a row."""
        if self._size:
            raise ValueError("load() fills an empty index")
        n = len(rowids)
        if matrix.shape != (n, self.dim):
            raise ValueError(f"matrix has shape {matrix.shape}, expected ({n}, {self.dim})")
        pos = {int(r): i for i, r in enumerate(rowids)}
        if len(pos) != n:
            raise ValueError("load() got a rowid twice")
        self._rowids = np.asarray(rowids, dtype=np.int64)
        self._matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self._corpus = np.fromiter((self._code(c) for c in corpora), dtype=np.int32, count=n)
        self._expires = np.fromiter((np.inf if e is None else e for e in expires),
                                    dtype=np.float64, count=n)
        self._stale = np.fromiter(stale, dtype=bool, count=n)
        self._alive = np.ones(n, dtype=bool)
        self._pos = pos
        self._size = n

    def update_attrs(self, rowid: int, corpus: str, expires: float | None, stale: bool) -> None:
        pos = self._pos.get(rowid)
        if pos is not None:
            self._corpus[pos] = self._code(corpus)
            self._expires[pos] = np.inf if expires is None else expires
            self._stale[pos] = stale

    def delete(self, rowids: Iterable[int]) -> None:
        for rowid in rowids:
            pos = self._pos.pop(rowid, None)
            if pos is not None:
                self._alive[pos] = False

    def search(
        self, query: Vector, *, corpora: Sequence[str] | None, now: float, limit: int,
        include_expired: bool, include_stale: bool, allowed: npt.NDArray[np.int64] | None = None,
    ) -> list[tuple[int, float]]:
        """(rowid, cosine) best first, ties by rowid, over `corpora` (None: every corpus)."""
        if limit <= 0 or self._size == 0:
            return []
        n = self._size
        mask = self._alive[:n].copy()
        if corpora is not None:
            codes = [self._corpus_codes[c] for c in corpora if c in self._corpus_codes]
            if not codes:
                return []
            mask &= (self._corpus[:n] == codes[0]) if len(codes) == 1 else np.isin(self._corpus[:n], codes)
        if not include_expired:
            mask &= self._expires[:n] > now
        if not include_stale:
            mask &= ~self._stale[:n]
        if allowed is not None:
            mask &= np.isin(self._rowids[:n], allowed)
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            return []
        # A full scan multiplies the matrix in place; a filtered one gathers rows first.
        scores = self._matrix[:n] @ query if candidates.size == n else self._matrix[candidates] @ query
        k = min(limit, scores.size)
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
        top = top[np.lexsort((self._rowids[candidates[top]], -scores[top]))]  # ties by rowid
        return [(int(self._rowids[candidates[t]]), float(scores[t])) for t in top]
