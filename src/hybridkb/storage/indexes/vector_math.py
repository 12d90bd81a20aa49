"""Dot products of stored rows with a query, on the calling thread only.

`block @ query` hands a product of more than ~9k multiply-adds to OpenBLAS's thread
pool. Between searches its workers go to sleep, and waking them on a machine whose
other core is busy costs more than the product: rescoring 1,200 rows took 1.6 ms
threaded against 0.2 ms on one thread (2-core machine, load 3), and a whole vector
search at 100k items 8-15 ms against 3.3 ms. einsum's own loop never leaves the thread,
and on one thread it is within ~10% of BLAS even for 100k rows.

Rows may be half precision (a coded base's matrix, vector_base.py: the stored vectors'
own precision, codec.py). numpy's float16 -> float32 cast is a scalar loop (about 2.8 ns a
value: 32 ms for 30,000 x 384 against 2 ms for the product), so half rows are widened by
bits instead, a block at a time: the sign-extended 16 bits shifted into a float32's place
(`_widen`) are the value times 2**-112 exactly, and the query is scaled by 2**112 to
match, so every product and sum is the one float32 rows would give, bit for bit.

Rows may also be one signed byte per component with a float32 scale per row (`ScaledRows`:
a coded base's rescoring matrix, a quarter of float32's size: the stored vectors' own
bytes, codec.py). Their products equal the stored values' but for float32 rounding (the
scale applied after the sum): they order the candidates, and the best are scored again on
the stored vectors themselves (vector_knn.py).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import codec

_BLOCK = 1_024  # half rows widened at a time (1.5 MB at 384 dimensions: within L2)
_SCALE = np.float32(2.0**112)  # a widened half value is the value times 2**-112
_KEEP = np.int32(-0x70000001)  # 0x8FFFFFFF: the sign and the bits a half value fills


def _widen(half: Any, out: npt.NDArray[np.int32]) -> npt.NDArray[np.float32]:
    """`half` (float16 rows) as float32 times 2**-112, written into `out` (int32, same shape)."""
    out[...] = np.asarray(half).view(np.int16)  # sign-extended (a shift that casts is 2x slower)
    np.left_shift(out, 13, out=out)
    np.bitwise_and(out, _KEEP, out=out)
    widened: npt.NDArray[np.float32] = out.view(np.float32)
    return widened


def as_float32(block: Any) -> npt.NDArray[np.float32]:
    """Rows as float32: exact for half rows, and about 3x faster than numpy's own cast."""
    rows = np.asarray(block)
    if rows.dtype != np.float16:
        out: npt.NDArray[np.float32] = np.asarray(rows, dtype=np.float32)
        return out
    widened = _widen(rows, np.empty(rows.shape, dtype=np.int32))
    np.multiply(widened, _SCALE, out=widened)
    return widened


def rows_into(matrix: Any, start: int, stop: int, out: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows start..stop of `matrix` (float32, float16 or ScaledRows) as float32, written into
    `out` (at least stop - start rows): what `as_float32(matrix[start:stop])` gives, bit for
    bit, in a buffer the caller keeps (fresh pages cost as much as the arithmetic: 1M int8
    rows times their scale took 0.60 s into fresh arrays, 0.21 s into one kept buffer)."""
    rows = out[: stop - start]
    if isinstance(matrix, ScaledRows):
        matrix.into(slice(start, stop), rows)
    elif getattr(matrix, "dtype", None) == np.float16:
        np.multiply(_widen(matrix[start:stop], rows.view(np.int32)), _SCALE, out=rows)
    else:
        rows[...] = matrix[start:stop]
    return rows


class ScaledRows:
    """Rows kept as int8 codes times a float32 scale per row (quantize()); indexing gives
    the rows back as float32 (close to the originals: the build's measurements use them)."""

    __slots__ = ("codes", "scales")

    def __init__(self, codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> None:
        self.codes = codes
        self.scales = scales

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)

    def __getitem__(self, sel: Any) -> npt.NDArray[np.float32]:
        shape = np.shape(self.scales[sel]) + tuple(self.codes.shape[1:])
        return self.into(sel, np.empty(shape, dtype=np.float32))

    def into(self, sel: Any, out: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The rows `sel` picks, their codes times their scale, written into `out` (of their
        shape: a buffer the caller keeps, as fresh pages cost as much as the arithmetic)."""
        out[...] = self.codes[sel]
        out *= np.asarray(self.scales[sel], dtype=np.float32)[..., None]
        return out

    def dot(self, q: npt.NDArray[np.float32], positions: Any) -> npt.NDArray[np.float32]:
        n = len(self.codes) if positions is None else len(positions)
        out: npt.NDArray[np.float32] = np.empty(n, dtype=np.float32)
        buffer = _buffer(q.shape[0]).view(np.float32)  # kept: fresh pages cost more than the cast
        for start in range(0, n, _BLOCK):
            stop = min(n, start + _BLOCK)
            sel = slice(start, stop) if positions is None else positions[start:stop]
            rows = buffer[: stop - start]
            rows[...] = self.codes[sel]
            np.einsum("ij,j->i", rows, q, out=out[start:stop])
            out[start:stop] *= self.scales[sel]
        return out


def quantize(rows: Any) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Rows as int8 codes and a scale per row (the row's largest magnitude over 127):
    per-row scales ordered the rescore candidates as well as per-dimension ones did (100k
    items, recall@10 0.973 against 0.972 before the exact pass, 0.984 both after it). The
    stored vectors' own layout (codec.quantize), so a base's rows hold the stored bytes."""
    return codec.quantize(as_float32(rows))


def dot_rows(block: Any, query: Any, positions: Any = None) -> npt.NDArray[np.float32]:
    """Each row of `block` (rows x dim, float32, float16 or ScaledRows; only the rows at
    `positions` when given) dotted with `query` (dim), as float32."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    if isinstance(block, ScaledRows):
        return block.dot(q, positions)
    if getattr(block, "dtype", None) == np.float16:
        return _dot_half(block, q, positions)
    rows = np.asarray(block if positions is None else block[positions], dtype=np.float32)
    out: npt.NDArray[np.float32] = np.einsum("ij,j->i", rows, q)  # (0, dim) gives (0,)
    return out


def dot_exact(block: Any, query: Any, positions: Any) -> npt.NDArray[np.float32]:
    """`dot_rows(block[positions], query)` bit for bit (for ScaledRows: the rows times their
    scale, then the product, unlike `dot_rows(block, query, positions)`, which scales the
    products), the rows made a block at a time in this thread's kept buffer: a build's
    measurement gathers up to 16,384 rows at a time, and fresh arrays of them were most of it."""
    if not isinstance(block, ScaledRows):
        return dot_rows(block[positions], query)
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    n = len(positions)
    out: npt.NDArray[np.float32] = np.empty(n, dtype=np.float32)
    buffer = _buffer(q.shape[0]).view(np.float32)
    for start in range(0, n, _BLOCK):
        sel = positions[start : start + _BLOCK]
        rows = block.into(sel, buffer[: len(sel)])
        np.einsum("ij,j->i", rows, q, out=out[start : start + len(sel)])
    return out


_buffers = threading.local()


def _buffer(dim: int) -> npt.NDArray[np.int32]:
    """This thread's widening buffer, kept: a fresh 1.5 MB array each search is fresh pages
    from the kernel, and faulting them in cost more than the widening (1M rows: 1.8 -> 1.4
    ms to rescore 4,096)."""
    kept: npt.NDArray[np.int32] | None = getattr(_buffers, "rows", None)
    if kept is None or kept.shape[1] != dim:
        kept = _buffers.rows = np.empty((_BLOCK, dim), dtype=np.int32)
    return kept


def _dot_half(block: Any, q: npt.NDArray[np.float32], positions: Any
              ) -> npt.NDArray[np.float32]:
    """Half rows widened a block at a time (those at `positions` gathered a block at a time:
    a filter's 50,000 rows are never copied whole)."""
    n = len(block) if positions is None else len(positions)
    out: npt.NDArray[np.float32] = np.empty(n, dtype=np.float32)
    scaled = q * _SCALE
    buffer = _buffer(q.shape[0])
    for start in range(0, n, _BLOCK):
        stop = min(n, start + _BLOCK)
        rows = block[start:stop] if positions is None else block[positions[start:stop]]
        widened = _widen(rows, buffer[: stop - start])
        np.einsum("ij,j->i", widened, scaled, out=out[start:stop])
    return out
