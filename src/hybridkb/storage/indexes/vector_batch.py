"""Rows read from the store for a vector base's build or its delta.

A batch read from the SQLite store carries the stored vectors as the store keeps them: int8
codes and a float32 scale per row (codec.quantize). A build writes those bytes into its int8
matrix as they are (vector_base.py), so their float32 values are made only when something
asks for `vectors` (a delta's rows, an exact scan of the store, a float32 base): the build
of an int8 base never makes them (1M rows: the dequantize, and a quantize of the result
back to the same bytes, were a fifth of its time).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import codec

Vector = npt.NDArray[np.float32]
RowIds = npt.NDArray[np.int64]


class Batch:
    """Ascending rowids, their unit vectors (given, or `codes` times `scales`, made on first
    use) and filter attributes."""

    __slots__ = ("_vectors", "codes", "corpora", "expires", "rowids", "scales", "stale")

    def __init__(self, rowids: RowIds, vectors: Vector | None, corpora: list[str],
                 expires: npt.NDArray[np.float64], stale: npt.NDArray[np.bool_], *,
                 codes: npt.NDArray[np.int8] | None = None,
                 scales: npt.NDArray[np.float32] | None = None) -> None:
        if vectors is None and (codes is None or scales is None):
            raise ValueError("a batch needs its vectors, or their int8 codes and scales")
        self.rowids = rowids
        self._vectors = vectors
        self.corpora = corpora
        self.expires = expires  # +inf: never
        self.stale = stale
        self.codes = codes  # the stored bytes (codec.quantize), when read from them
        self.scales = scales

    @property
    def vectors(self) -> Vector:
        if self._vectors is None:
            assert self.codes is not None and self.scales is not None
            self._vectors = codec.dequantize(self.codes, self.scales)
        return self._vectors

    def quantized(self) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
        """The rows as int8 codes and scales: the stored bytes where the batch has them, else
        `codec.quantize` of its vectors (the same bytes for stored values: quantize is
        idempotent on its own output, tests/test_vector_int8.py)."""
        if self.codes is not None and self.scales is not None:
            return self.codes, self.scales
        return codec.quantize(np.asarray(self.vectors, dtype=np.float32))
