"""Half rows (a format-4 generation's matrix, vector_base.py: the stored vectors' own values)
widen by bits exactly (vector_math.py), so their scores are those of float32 rows; a
generation of an earlier format answers until the base is built again in the current one
(tests/test_vector_int8.py: the current format's int8 matrix)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from vector_files import generation, unit

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.model import Filters, now_ts
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_base, verify
from hybridkb.storage.indexes.vector_math import as_float32, dot_rows

K = 10
AREA = SearchArea(None, Filters(include_expired=True, include_stale=True), now_ts())


def test_half_rows_widen_exactly_and_score_as_float32_rows() -> None:
    rows = unit(3000, 384, seed=1)
    rows[0, :6] = [0.0, -0.0, 1e-6, -3e-5, 6.1e-5, -1.0]  # zeros, subnormal halves, extremes
    half = rows.astype(np.float16)
    full = half.astype(np.float32)
    widened = as_float32(half)
    assert np.array_equal(widened, full) and np.array_equal(np.signbit(widened), np.signbit(full))
    query = unit(1, 384, seed=2)[0]
    assert np.array_equal(dot_rows(half, query), dot_rows(full, query))  # bit for bit
    picks = np.array([2999, 5, 0, 1717, 5])
    assert np.array_equal(dot_rows(half, query, picks), dot_rows(full[picks], query))
    assert dot_rows(half, query, np.zeros(0, dtype=np.int64)).shape == (0,)


def as_format(folder: Path, stored: np.ndarray, version: int) -> None:
    """Rewrite a generation as an earlier format wrote it: 3, a float32 matrix for every base;
    4, a coded base's matrix at half precision (`stored`: the stored vectors, rowid order);
    5, the int8 matrix. Before 6, codes were kept in base order, without cells."""
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("codes", {}).pop("cells", None):
        meta["codes"].pop("budget", None)
        order = np.fromfile(folder / "order.i32", dtype=np.int32)
        cell_order = np.fromfile(folder / "codes.u64", dtype=np.uint64).reshape(-1, len(order))
        in_base = np.empty_like(cell_order)
        in_base[:, order] = cell_order
        in_base.tofile(folder / "codes.u64")
        for name in vector_base.CELL_FILES:
            (folder / name).unlink()
    if version < 5 and meta.pop("matrix") == "i8":
        for name in ("matrix.i8", vector_base.SCALES):
            (folder / name).unlink()
        if version == 4:
            stored.astype(np.float16).tofile(folder / "matrix.f16")
            meta["matrix"] = "f16"
        else:
            stored.astype(np.float32).tofile(folder / "matrix.f32")
    meta["format"] = version
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / verify.MANIFEST).unlink()
    verify.seal(folder)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("mode", ["auto", "codes"])
def test_a_previous_format_answers_and_is_built_again(tmp_path: Path, mode: str, version: int) -> None:
    vectors = unit(1500, 32, seed=5)
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann=mode) as kb:
        kb.add_many([{"id": f"v{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)])
        kb.optimize()
        want = kb.backend.vector_search(vectors[11], AREA, 5)
    old = generation(db)
    as_format(old, vectors.astype(np.float16).astype(np.float32), version)
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann=mode) as kb:
        assert kb.backend.vector_search(vectors[11], AREA, 5) == want
        kb.backend._vectors.wait()
        new = generation(db)
        assert new != old and not old.exists()  # built in the current format; the old one gone
        assert json.loads((new / "meta.json").read_text())["format"] == vector_base.FORMAT
        assert kb.backend.vector_search(vectors[11], AREA, 5) == want
        assert not kb.check()["problems"]
