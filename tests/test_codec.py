"""The vector codec: byte layout, round trips, and the checks every write and query share."""

from __future__ import annotations

import numpy as np
import pytest

from hybridkb import DimensionMismatchError, InvalidInputError, StoreError
from hybridkb.storage import codec


def test_blob_round_trip_is_little_endian_float32() -> None:
    vec = np.array([1.0, -0.5, 0.25, 3.0e-8], dtype=np.float32)
    blob = codec.to_blob(vec)
    assert blob == b"".join(np.array([x], dtype="<f4").tobytes() for x in vec)
    assert len(blob) == 16
    back = codec.from_blob(blob)
    assert back.dtype == np.float32 and back.flags.writeable
    np.testing.assert_array_equal(back, vec)


def test_blob_from_float64_values_rounds_to_float32() -> None:
    back = codec.from_blob(codec.to_blob([0.1, 0.2]))
    np.testing.assert_array_equal(back, np.array([0.1, 0.2], dtype=np.float32))


def test_matrix_from_blobs() -> None:
    rows = [np.arange(3, dtype=np.float32) + i for i in range(4)]
    matrix = codec.matrix_from_blobs([codec.to_blob(r) for r in rows], 3)
    assert matrix.shape == (4, 3) and matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix, np.stack(rows))
    assert codec.matrix_from_blobs([], 5).shape == (0, 5)


def test_item_vectors_are_stored_as_int8_and_a_scale_on_both_dialects() -> None:
    vec = np.array([0.1, -0.7, 1 / 3, 2.0e-6], dtype=np.float32)
    vec /= np.linalg.norm(vec)
    blob = codec.to_stored_blob(vec)
    codes = np.rint(vec / (np.float32(np.abs(vec).max()) / np.float32(127)))
    assert codes.tolist() == [18, -127, 60, 0]
    scale = np.float32(1 / np.sqrt(18**2 + 127**2 + 60**2))  # the codes' length: unit rows
    assert len(blob) == 4 + 4 == codec.stored_bytes(4)
    assert blob[:4] == np.array([scale], dtype="<f4").tobytes()
    assert np.frombuffer(blob[4:], dtype=np.int8).tolist() == [18, -127, 60, 0]
    back = codec.from_stored_blob(blob)
    assert back.dtype == np.float32 and back.tolist() == codec.stored(vec).tolist()
    assert back.tolist() == (codes.astype(np.float32) * scale).tolist()
    assert abs(float(back @ back) - 1) < 1e-6 and float(back @ vec) <= 1.0
    assert np.max(np.abs(back - vec)) < 0.005 and back.tolist() != vec.tolist()
    # PostgreSQL's float32 column gets the same values, so both dialects score alike
    assert codec.to_pg([vec])[0].tolist() == back.tolist()
    rows = [vec, -vec]
    matrix = codec.matrix_from_stored_blobs([codec.to_stored_blob(r) for r in rows], 4)
    assert matrix.shape == (2, 4) and matrix.tolist() == [back.tolist(), (-back).tolist()]
    assert codec.to_stored_blobs(rows) == [codec.to_stored_blob(r) for r in rows]
    assert codec.matrix_from_stored_blobs([], 4).shape == (0, 4)
    assert codec.stored(np.zeros(4)).tolist() == [0.0] * 4  # no division by zero
    # storing the stored values again changes nothing (a rebuild, a copy between stores)
    assert codec.to_stored_blob(back) == blob
    # migration 011's conversion, then 013's
    half = codec.half_from_f32_blob(codec.to_blob(vec))
    assert half == vec.astype("<f2").tobytes()
    assert codec.stored_from_half_blob(half) == codec.to_stored_blob(vec.astype(np.float16))
    assert codec.stored_from_half_blobs([half, half[:4]]) == [codec.stored_from_half_blob(half),
                                                             codec.stored_from_half_blob(half[:4])]
    with pytest.raises(StoreError, match="expected 8"):
        codec.matrix_from_stored_blobs([blob[:-1]], 4)


def test_stored_values_move_a_cosine_by_about_a_thousandth() -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((500, 384)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rows[:50] + 0.5 * rng.standard_normal((50, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    moved = np.abs(queries @ codec.stored_rows(rows).T - queries @ rows.T)
    assert moved.max() < 2e-3 and 0 < moved.mean() < 5e-4
    self_cosines = np.einsum("ij,ij->i", codec.stored_rows(rows), rows)
    assert np.all(self_cosines <= 1.0) and self_cosines.min() > 0.9998


def test_pgvector_forms_are_float32_arrays() -> None:
    out = codec.to_pg([[0.6, 0.8], np.array([0.8, 0.6], dtype=np.float64)])
    assert [v.dtype for v in out] == [np.float32, np.float32]
    np.testing.assert_array_equal(out[1], codec.stored([0.8, 0.6]))  # the stored values
    np.testing.assert_allclose(out[1], [0.8, 0.6], atol=0.005)
    assert codec.to_pg([]) == []

    class FakeVector:  # what pgvector.Vector offers
        def to_numpy(self) -> np.ndarray:
            return np.array([1.0, 2.0], dtype=np.float64)

    got = codec.from_pg(FakeVector())
    assert got.dtype == np.float32 and got.tolist() == [1.0, 2.0]


def test_check_dim_names_the_item_and_both_sizes() -> None:
    codec.check_dim([0.0] * 4, 4, label="item 'a': vector")
    with pytest.raises(DimensionMismatchError, match=r"item 'a': vector has 3 dimensions, store has 4"):
        codec.check_dim([0.0] * 3, 4, label="item 'a': vector")
    with pytest.raises(DimensionMismatchError, match="store has None"):  # the store holds no vectors
        codec.check_dim([0.0] * 3, None, label="item 'a': vector")
    with pytest.raises(DimensionMismatchError, match=r"item 'y'.*the new model has 2"):
        codec.check_dims([("x", [1.0, 2.0]), ("y", [1.0])], 2, holder="the new model has")


def test_normalized_scales_to_unit_length_and_flattens_one_row() -> None:
    out = codec.normalized([[3, 4]], 2, label="item 'v'")
    assert out.dtype == np.float32 and out.shape == (2,)
    np.testing.assert_allclose(out, [0.6, 0.8], rtol=1e-6)
    assert codec.normalized([1, 0, 0], None, label="x").tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(("value", "error", "message"), [
    ([1.0, float("nan")], InvalidInputError, "NaN or infinite"),
    ([1.0, float("inf")], InvalidInputError, "NaN or infinite"),
    ([0.0, 0.0], InvalidInputError, "all zeros"),
    (["a", "b"], InvalidInputError, "not a list of numbers"),
    ([[1.0, 2.0], [3.0, 4.0]], InvalidInputError, "not a flat list"),
    ([1.0, 2.0, 3.0], DimensionMismatchError, "has 3 dimensions, the store uses 2"),
])
def test_normalized_refuses_bad_vectors(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        codec.normalized(value, 2, label="item 'v'")


def test_query_vector_checks_size_and_drops_non_finite() -> None:
    q = codec.query(np.array([[0.6, 0.8]]), 2)
    assert q is not None and q.shape == (2,) and q.dtype == np.float32
    assert codec.query([float("nan"), 1.0], 2) is None  # finds nothing, not an error
    with pytest.raises(DimensionMismatchError, match="query vector has 3 dimensions, store has 2"):
        codec.query([1.0, 2.0, 3.0], 2)


def test_normalized_scales_finite_vectors_whose_squares_overflow() -> None:
    vec = codec.normalized([3e30, -4e30, 0.0], 3, label="item 'v'")
    assert vec.tolist() == pytest.approx([0.6, -0.8, 0.0])


def test_the_asked_queries_pack_their_vectors_with_the_codec() -> None:
    """storage/asked.py keeps query vectors in the codec's blob layout, and no module but
    the codec spells that layout itself."""
    from pathlib import Path

    from hybridkb.storage import asked

    vec = np.array([0.25, -1.5, 3.0], dtype=np.float64)
    kept = asked.row(vec)
    assert kept is not None and kept[1] == 3 and kept[2] == codec.to_blob(vec)
    rows = [(i + 1, codec.to_blob(np.roll([1.0, 2.0, 2.0], i))) for i in range(asked.MIN_ASKED)]
    matrix, newest = asked.decode(rows, 3)
    assert matrix is not None and newest == asked.MIN_ASKED
    assert np.allclose(matrix[0], [1 / 3, 2 / 3, 2 / 3])
    src = Path(codec.__file__).parents[1]
    spelled = [p.relative_to(src).as_posix() for p in src.rglob("*.py")
               if p.name != "codec.py" and ('"<f4"' in p.read_text() or "'<f4'" in p.read_text())]
    assert spelled == []
