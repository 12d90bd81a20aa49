"""The one vector codec: dtype, the dimension check, and each dialect's wire form.

Vectors are float32 in memory. An item's stored vector is one signed byte per component
times a float32 scale per row (`stored`, `quantize`: unit length, its direction rounded):
SQLite keeps it as a blob of the scale (little-endian float32) then the bytes, dim + 4
bytes (migration 013: about half the float16 blobs of migrations 011-012, a quarter of
float32's), PostgreSQL a float32 `vector` of the same values (each byte times the scale,
in float32), so both dialects, the exact scans and the derived vector base (whose int8
matrix holds the same bytes) score the same numbers. It moves a unit vector's cosines by
about 1e-3; nDCG@10 on every dev set moved by less than 0.002 (docs/benchmarks.md,
tests/test_compact_vectors.py). Query vectors kept for measuring (asked.py) stay float32
blobs. Every place that writes or reads a vector goes through here, so a vector of the
wrong size is refused with the same error wherever it enters, and the byte layout is
defined once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import DimensionMismatchError, InvalidInputError, StoreError

DTYPE = np.float32
_BLOB_DTYPE = np.dtype("<f4")  # sqlite-vec's float[] layout: the asked queries' blobs
Vector = npt.NDArray[np.float32]


def check_dim(vector: Sequence[float] | Vector, dim: int | None, *, label: str,
              holder: str = "store has") -> None:
    """Raise DimensionMismatchError unless `vector` has `dim` entries (None: no vectors yet).

    `label` names the vector (``item 'x': vector``, ``query vector``) and `holder` what
    sets the size (``store has``, ``the new model has``).
    """
    if dim is None or len(vector) != dim:
        raise DimensionMismatchError(f"{label} has {len(vector)} dimensions, {holder} {dim}")


def check_dims(labelled: Iterable[tuple[str | None, Sequence[float] | Vector]], dim: int | None, *,
               holder: str = "store has") -> None:
    """check_dim for each (item id, vector)."""
    for item_id, vector in labelled:
        check_dim(vector, dim, label=f"item {item_id!r}: vector", holder=holder)


def as_array(vector: Any) -> Vector:
    """float32, one dimension (a one-row batch, as embedders return it, is flattened)."""
    return np.asarray(vector, dtype=DTYPE).reshape(-1)


def normalized(value: Any, dim: int | None, *, label: str) -> Vector:
    """A caller's vector made storable: float32, flat, `dim` long, finite, unit length.

    Bad values are InvalidInputError, a wrong size DimensionMismatchError (`dim` None:
    any size). `label` names the vector in messages, e.g. ``item 'x'``.
    """
    try:
        vec = np.asarray(value, dtype=DTYPE)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"{label}: vector is not a list of numbers") from exc
    if vec.ndim == 2 and vec.shape[0] == 1:  # one row of a batch, as embedders return it
        vec = vec[0]
    if vec.ndim != 1:
        raise InvalidInputError(f"{label}: vector is not a flat list of numbers")
    if dim is not None and vec.size != dim:
        raise DimensionMismatchError(
            f"{label}: vector has {vec.size} dimensions, the store uses {dim}")
    # NaN or inf when any component is: one pass, not two. np.linalg.norm computes the
    # same sqrt(v . v) behind more checks (this function: 7.8 -> 5.9 us at 384 dimensions).
    with np.errstate(over="ignore", invalid="ignore"):
        norm = math.sqrt(float(vec.dot(vec)))
    if not math.isfinite(norm):
        if not np.all(np.isfinite(vec)):
            raise InvalidInputError(f"{label}: vector has NaN or infinite values")
        vec = vec / np.max(np.abs(vec))  # finite, but its squares overflow float32
        norm = math.sqrt(float(vec.dot(vec)))
    if norm == 0.0:
        raise InvalidInputError(f"{label}: vector is all zeros")
    out: Vector = vec / norm
    return out


def query(vector: Any, dim: int) -> Vector | None:
    """A query vector checked against the store's size; None when it has NaN or infinities
    (such a query finds nothing, it is not an error)."""
    q = as_array(vector)
    check_dim(q, dim, label="query vector")
    return q if bool(np.all(np.isfinite(q))) else None


# -- item vectors as stored: int8 and a scale per row --------------------------------------

_SCALE_DTYPE = np.dtype("<f4")  # a stored row's scale, first in its blob
SCALE_BYTES = _SCALE_DTYPE.itemsize
_HALF_DTYPE = np.dtype("<f2")  # an item vector's blob from migration 011 to 013


def stored_bytes(dim: int) -> int:
    """The length of a stored item vector's blob: the scale, then a byte a component."""
    return SCALE_BYTES + int(dim)


def quantize(rows: Any) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Rows (n x dim) as int8 codes and a float32 scale per row. The codes are each value
    over the row's step (its largest magnitude over 127), rounded to even; the scale is one
    over the codes' length, so a stored row is unit length again (a cosine stays a dot
    product, never above 1) and only its direction moved. Each step is exactly rounded
    (float32 steps, the length from an integer sum in float64), so PostgreSQL's migration
    018 repeats it in SQL and gets the same bytes. An all-zero row gets codes 0, scale 1."""
    block = np.asarray(rows, dtype=DTYPE)
    if not block.size:
        return np.zeros(block.shape, dtype=np.int8), np.ones(block.shape[0], dtype=DTYPE)
    steps = (np.abs(block).max(axis=1) / np.float32(127.0)).astype(DTYPE)
    steps[steps == 0] = 1.0
    codes = np.clip(np.rint(block / steps[:, None]), -127, 127).astype(np.int8)
    wide = codes.astype(np.float64)
    lengths = np.sqrt(np.einsum("ij,ij->i", wide, wide))  # integer sums: exact in any order
    lengths[lengths == 0] = 1.0
    scales: npt.NDArray[np.float32] = (1.0 / lengths).astype(DTYPE)
    return codes, scales


def dequantize(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The float32 values int8 `codes` and their row `scales` stand for (what is scored)."""
    out: npt.NDArray[np.float32] = codes.astype(DTYPE)
    out *= np.asarray(scales, dtype=DTYPE).reshape(-1, 1)
    return out


def stored(vector: Sequence[float] | Vector) -> Vector:
    """The float32 values the system of record keeps for `vector` (each row's, for a matrix)."""
    values = np.asarray(vector, dtype=DTYPE)
    if values.ndim == 2:
        return stored_rows(values)
    out: Vector = stored_rows(values.reshape(1, -1))[0]
    return out


def stored_rows(rows: Any) -> npt.NDArray[np.float32]:
    """`stored` of each row of a matrix."""
    return dequantize(*quantize(rows))


def _blobs(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> list[bytes]:
    packed = np.empty((len(codes), SCALE_BYTES + codes.shape[1]), dtype=np.uint8)
    scale_bytes = np.ascontiguousarray(scales, dtype=_SCALE_DTYPE).view(np.uint8)
    packed[:, :SCALE_BYTES] = scale_bytes.reshape(-1, SCALE_BYTES)
    packed[:, SCALE_BYTES:] = codes.view(np.uint8)
    return [row.tobytes() for row in packed]


def to_stored_blob(vector: Sequence[float] | Vector) -> bytes:
    """An item vector as SQLite's vector table keeps it (its scale, then its int8 codes)."""
    return _blobs(*quantize(np.asarray(vector, dtype=DTYPE).reshape(1, -1)))[0]


def to_stored_blobs(vectors: Sequence[Vector]) -> list[bytes]:
    """`to_stored_blob` of each of `vectors` (all of one size), converted in one go."""
    if not vectors:
        return []
    return _blobs(*quantize(np.asarray(np.stack(vectors), dtype=DTYPE).reshape(len(vectors), -1)))


def _split(joined: bytes, n: int, dim: int) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    if len(joined) != n * stored_bytes(dim):
        raise StoreError(f"a stored vector has {len(joined) // max(n, 1)} bytes, "
                         f"expected {stored_bytes(dim)} for {dim} dimensions")
    raw = np.frombuffer(joined, dtype=np.uint8).reshape(n, stored_bytes(dim))
    scales = raw[:, :SCALE_BYTES].copy().view(_SCALE_DTYPE).reshape(n)
    return raw[:, SCALE_BYTES:].view(np.int8), scales.astype(DTYPE, copy=False)


def from_stored_blob(blob: bytes) -> Vector:
    out: Vector = matrix_from_stored_blobs([blob], len(blob) - SCALE_BYTES)[0]
    return out


def matrix_from_stored_blobs(blobs: Sequence[bytes], dim: int) -> npt.NDArray[np.float32]:
    """Rows of a (len(blobs), dim) float32 matrix from stored item blobs, decoded in one go."""
    if not blobs:
        return np.zeros((0, dim), dtype=DTYPE)
    return dequantize(*_split(b"".join(blobs), len(blobs), dim))


def codes_from_stored_blobs(blobs: Sequence[bytes], dim: int
                            ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Stored item blobs as their int8 codes (rows x dim) and scales, not decoded: what
    `dequantize` turns into `matrix_from_stored_blobs`'s rows."""
    if not blobs:
        return np.zeros((0, dim), dtype=np.int8), np.zeros(0, dtype=DTYPE)
    return _split(b"".join(blobs), len(blobs), dim)


def stored_from_half_blob(blob: bytes) -> bytes:
    """A float16 item blob (stores from migration 011 to 013) in the stored layout."""
    return stored_from_half_blobs([blob])[0]


def stored_from_half_blobs(blobs: Sequence[bytes]) -> list[bytes]:
    """`stored_from_half_blob` of each, converted in one go where they are of one size (a
    pending re-embedding's may differ from the store's)."""
    if not blobs:
        return []
    if len({len(b) for b in blobs}) > 1:
        return [stored_from_half_blob(b) for b in blobs]
    half = np.frombuffer(b"".join(blobs), dtype=_HALF_DTYPE).reshape(len(blobs), -1)
    return _blobs(*quantize(half.astype(DTYPE)))


def half_from_f32_blob(blob: bytes) -> bytes:
    """A float32 item blob (stores before migration 011) as migration 011 kept it: float16."""
    return np.frombuffer(blob, dtype=_BLOB_DTYPE).astype(_HALF_DTYPE).tobytes()


# -- float32 blobs (sqlite-vec's layout): query vectors ---------------------------------


def to_blob(vector: Sequence[float] | Vector) -> bytes:
    return np.asarray(vector, dtype=_BLOB_DTYPE).tobytes()


def from_blob(blob: bytes) -> Vector:
    return np.frombuffer(blob, dtype=_BLOB_DTYPE).astype(DTYPE)


def matrix_from_blobs(blobs: Sequence[bytes], dim: int) -> npt.NDArray[np.float32]:
    """Rows of a (len(blobs), dim) float32 matrix, decoded in one go."""
    if not blobs:
        return np.zeros((0, dim), dtype=DTYPE)
    flat = np.frombuffer(b"".join(blobs), dtype=_BLOB_DTYPE).astype(DTYPE, copy=False)
    return flat.reshape(len(blobs), dim)


# -- pgvector: numpy arrays through pgvector.psycopg's adapter ------------------------------


def to_pg(vectors: Iterable[Sequence[float] | Vector]) -> list[Vector]:
    """Values for a `vector[]` parameter of item vectors: the stored values (`stored`), so
    both dialects score the same numbers."""
    rows = [np.asarray(v, dtype=DTYPE).reshape(-1) for v in vectors]
    if not rows:
        return []
    if len({len(r) for r in rows}) > 1:
        return [stored(r) for r in rows]
    return list(stored_rows(np.stack(rows)))


def from_pg(value: Any) -> Vector:
    """A `vector` column's value (pgvector's Vector or a numpy array) as float32."""
    raw = value.to_numpy() if hasattr(value, "to_numpy") else value
    return np.asarray(raw, dtype=DTYPE)
