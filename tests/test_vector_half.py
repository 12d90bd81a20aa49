"""A coded vector base keeps its matrix at half precision (vector_base.py): the stored
vectors' own values, so its answers and scores are those of float32 rows; widening half rows
by bits (vector_math.py) is exact; damage to the half matrix is found; a generation of the
previous format answers until the base is built again in the current one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.evaluation import load
from hybridkb.model import Filters, now_ts
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_base, verify
from hybridkb.storage.indexes.vector_math import as_float32, dot_rows

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
K = 10
AREA = SearchArea(None, Filters(include_expired=True, include_stale=True), now_ts())


def generation(db: Path) -> Path:
    (found,) = [p for p in (db.with_name(db.name + ".idx") / "vectors").iterdir() if p.is_dir()]
    return found


def unit(n: int, dim: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    out: np.ndarray = m / np.linalg.norm(m, axis=1, keepdims=True)
    return out


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


@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="shared dev data not found")
def test_a_coded_base_on_a_real_corpus_keeps_half_the_matrix_and_float32s_recall(
        tmp_path: Path) -> None:
    data = load(DATA / "scifact")
    model = HashingEmbedder(384)
    vectors = np.asarray(model.embed_documents([d.embedding_text for d in data.corpus]), np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
    queries = np.stack([model.embed_query(q.text) for q in data.queries[:150]]).astype(np.float32)
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=model, vector_ann="codes", sample_queries=False) as kb:
        kb.add_many([{"id": str(k), "text": d.text or d.id, "vector": v}
                     for k, (d, v) in enumerate(zip(data.corpus, vectors, strict=True))])
        kb.optimize()
        folder = generation(db)
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["format"] == vector_base.FORMAT and meta["matrix"] == "f16"
        assert meta["codes"]["rescore"] is not None  # the code pass answers, not an exact scan
        assert not (folder / "matrix.f32").exists()
        assert (folder / "matrix.f16").stat().st_size == vectors.size * 2  # half of float32's
        stored = vectors.astype(np.float16).astype(np.float32)
        got = [kb.backend.vector_search(q, AREA, K) for q in queries]
    keys = {int(r): k for k, r in enumerate(np.asarray(kb.backend._vectors._base.rowids))}
    recall = []
    for q, hits in zip(queries, got, strict=True):
        rows = np.array([keys[int(key)] for key, _ in hits])
        # the scores are exact on the stored values: what float32 rows of them give, bit for bit
        assert np.array_equal(np.array([s for _, s in hits], np.float32), dot_rows(stored[rows], q))
        kth = np.sort(vectors @ q)[-K]  # numpy's float32 exact top 10 of the original vectors
        recall.append(min(K, int(np.sum(vectors[rows] @ q >= kth - 1e-6))) / K)
    assert float(np.mean(recall)) >= 0.95, np.mean(recall)


def test_damage_to_a_half_matrix_is_found_and_the_search_answers(tmp_path: Path) -> None:
    vectors = unit(1200, 32, seed=4)
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann="codes") as kb:
        kb.add_many([{"id": f"v{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)])
        kb.optimize()
    matrix = generation(db) / "matrix.f16"
    with open(matrix, "r+b") as f:
        f.seek(4096)
        f.write(b"\x7b" * 8192)
    assert any("matrix.f16" in p for p in verify.generation_problems(generation(db), full=True))
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann="codes") as kb:
        assert any("matrix.f16" in p["problem"] for p in kb.check()["problems"])
        hits = kb.backend.vector_search(vectors[7], AREA, 3)
        assert hits and np.isclose(hits[0][1], 1.0, atol=1e-3)
        assert not kb.check()["problems"]  # the search built the base again from the items


def as_format_3(folder: Path) -> None:
    """Rewrite a generation as the previous format wrote it: a float32 matrix for every base."""
    meta = json.loads((folder / "meta.json").read_text())
    if meta.pop("matrix") == "f16":
        half = np.fromfile(folder / "matrix.f16", dtype=np.float16)
        half.astype(np.float32).tofile(folder / "matrix.f32")
        (folder / "matrix.f16").unlink()
    meta["format"] = 3
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / verify.MANIFEST).unlink()
    verify.seal(folder)


@pytest.mark.parametrize("mode", ["auto", "codes"])
def test_a_previous_format_answers_and_is_built_again(tmp_path: Path, mode: str) -> None:
    vectors = unit(1500, 32, seed=5)
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann=mode) as kb:
        kb.add_many([{"id": f"v{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)])
        kb.optimize()
        want = kb.backend.vector_search(vectors[11], AREA, 5)
    old = generation(db)
    as_format_3(old)
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann=mode) as kb:
        assert kb.backend.vector_search(vectors[11], AREA, 5) == want
        kb.backend._vectors.wait()
        new = generation(db)
        assert new != old and not old.exists()  # built in the current format; the old one gone
        assert json.loads((new / "meta.json").read_text())["format"] == vector_base.FORMAT
        assert kb.backend.vector_search(vectors[11], AREA, 5) == want
        assert not kb.check()["problems"]
