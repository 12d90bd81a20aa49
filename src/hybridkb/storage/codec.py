"""The one vector codec: dtype, the dimension check, and each dialect's wire form.

Vectors are float32 in memory. An item's stored vector has half precision (`stored`):
SQLite keeps it as a little-endian float16 blob (migration 011: half the bytes of the
float32 blobs before it), PostgreSQL a float32 `vector` of the same values, so both
dialects and the derived vector base (float32 rows decoded from the blobs) score the same
numbers. Half precision moves a unit vector's cosines by about 1e-4; nDCG@10 on every dev
set moved by less than 0.002 (docs/benchmarks.md). Query vectors kept for measuring
(asked.py) stay float32 blobs. Every place that writes or reads a vector goes through
here, so a vector of the wrong size is refused with the same error wherever it enters,
and the byte layout is defined once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import DimensionMismatchError, InvalidInputError

DTYPE = np.float32
_BLOB_DTYPE = np.dtype("<f4")  # sqlite-vec's float[] layout: the asked queries' blobs
_STORED_DTYPE = np.dtype("<f2")  # an item vector's blob in SQLite's vector table
STORED_BYTES = _STORED_DTYPE.itemsize  # bytes a dimension of a stored item vector
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


# -- item vectors as stored: half precision ---------------------------------------------


def stored(vector: Sequence[float] | Vector) -> Vector:
    """The float32 values the system of record keeps for `vector`: rounded to half precision."""
    out: Vector = np.asarray(vector, dtype=DTYPE).astype(_STORED_DTYPE).astype(DTYPE)
    return out


def to_stored_blob(vector: Sequence[float] | Vector) -> bytes:
    """An item vector as SQLite's vector table keeps it (little-endian float16)."""
    return np.asarray(vector, dtype=DTYPE).astype(_STORED_DTYPE).tobytes()


def to_stored_blobs(vectors: Sequence[Vector]) -> list[bytes]:
    """`to_stored_blob` of each of `vectors` (all of one size), converted in one go."""
    if not vectors:
        return []
    half = np.asarray(np.stack(vectors), dtype=DTYPE).reshape(len(vectors), -1).astype(_STORED_DTYPE)
    return [row.tobytes() for row in half]


def from_stored_blob(blob: bytes) -> Vector:
    out: Vector = np.frombuffer(blob, dtype=_STORED_DTYPE).astype(DTYPE)
    return out


def half_matrix_from_stored_blobs(blobs: Sequence[bytes], dim: int) -> npt.NDArray[np.float16]:
    """The stored values themselves, (len(blobs), dim) half precision, undecoded."""
    if not blobs:
        return np.zeros((0, dim), dtype=_STORED_DTYPE)
    flat: npt.NDArray[np.float16] = np.frombuffer(b"".join(blobs), dtype=_STORED_DTYPE)
    return flat.reshape(len(blobs), dim)


def matrix_from_stored_blobs(blobs: Sequence[bytes], dim: int) -> npt.NDArray[np.float32]:
    """Rows of a (len(blobs), dim) float32 matrix from stored item blobs, decoded in one go."""
    if not blobs:
        return np.zeros((0, dim), dtype=DTYPE)
    flat = np.frombuffer(b"".join(blobs), dtype=_STORED_DTYPE).astype(DTYPE)
    return flat.reshape(len(blobs), dim)


def stored_from_f32_blob(blob: bytes) -> bytes:
    """A float32 item blob (stores before migration 011) in the stored layout."""
    return np.frombuffer(blob, dtype=_BLOB_DTYPE).astype(_STORED_DTYPE).tobytes()


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
    return [stored(v) for v in vectors]


def from_pg(value: Any) -> Vector:
    """A `vector` column's value (pgvector's Vector or a numpy array) as float32."""
    raw = value.to_numpy() if hasattr(value, "to_numpy") else value
    return np.asarray(raw, dtype=DTYPE)
