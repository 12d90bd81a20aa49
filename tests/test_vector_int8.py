"""A coded vector base keeps its rescoring matrix as int8 with a scale per row (vector_base.py,
vector_math.quantize): a quarter of float32's size, the same bytes as the stored vectors
(codec.py); its products order the candidates, and the best are scored again on the store's
own values (its rows where they are the stored bytes, else read back from the store:
vector_knn.knn), so a search returns the same hits and the same cosines as a float32 matrix
of the stored values; a row deleted or changed after the build is scored as the store
holds it now; damage to the int8 files is found."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace as dc_replace
from pathlib import Path

import numpy as np
import pytest
from vector_files import DATA, generation, unit

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.evaluation import load
from hybridkb.model import Filters, now_ts
from hybridkb.storage import codec
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_base, verify
from hybridkb.storage.indexes.vector_base import VectorBase, Wanted
from hybridkb.storage.indexes.vector_batch import Batch
from hybridkb.storage.indexes.vector_knn import _rescored, knn
from hybridkb.storage.indexes.vector_math import ScaledRows, dot_rows, quantize
from hybridkb.storage.indexes.vectors import VectorDelta

K = 10
AREA = SearchArea(None, Filters(include_expired=True, include_stale=True), now_ts())
EVERYTHING = Wanted(None, time.time(), True, True)


def as_float32(folder: Path, stored: np.ndarray, target: Path) -> Path:
    """A copy of an int8 generation with the stored values as a float32 matrix instead."""
    shutil.copytree(folder, target)
    meta = json.loads((target / "meta.json").read_text())
    assert meta["matrix"] == "i8"
    stored.astype(np.float32).tofile(target / "matrix.f32")
    for name in ("matrix.i8", vector_base.SCALES, verify.MANIFEST):
        (target / name).unlink()
    meta.update(matrix="f32")
    (target / "meta.json").write_text(json.dumps(meta))
    verify.seal(target)
    return target


def test_int8_rows_are_close_and_index_as_float32() -> None:
    rows = unit(2000, 384, seed=1)
    rows[3] = 0.0  # a zero row keeps a usable scale
    codes, scales = quantize(rows.astype(np.float16))
    assert codes.dtype == np.int8 and scales.dtype == np.float32 and scales[3] == 1.0
    scaled = ScaledRows(codes, scales)
    query = unit(1, 384, seed=2)[0]
    exact = rows @ query
    assert np.abs(dot_rows(scaled, query) - exact).max() < 0.01
    picks = np.array([1999, 5, 0, 1717, 5])
    assert np.array_equal(dot_rows(scaled, query, picks), dot_rows(scaled, query)[picks])
    assert np.allclose(scaled[picks], rows[picks], atol=0.01) and len(scaled) == 2000
    assert dot_rows(scaled, query, np.zeros(0, dtype=np.int64)).shape == (0,)


def test_a_build_from_the_stored_bytes_writes_the_files_a_build_from_their_values_does(
        tmp_path: Path) -> None:
    """The store hands a build its int8 codes and scales (vector_batch.Batch), written into the
    base as they are: the same bytes as quantizing their float32 values again, in every file."""
    n, dim = 5_000, 48
    rows = unit(n, dim, seed=5)
    rows[17] = 0.0  # a zero row: codes 0, scale 1 either way
    rows[18] *= 1e-30  # a tiny one
    codes, scales = codec.quantize(rows)

    def batches(stored: bool) -> list[Batch]:
        out = []
        for a in range(0, n, 1_000):
            b = min(n, a + 1_000)
            out.append(Batch(np.arange(a, b, dtype=np.int64) * 3 + 1,
                             None if stored else codec.dequantize(codes[a:b], scales[a:b]),
                             ["default"] * (b - a), np.full(b - a, np.inf), np.zeros(b - a, bool),
                             codes=codes[a:b] if stored else None, scales=scales[a:b] if stored else None))
        return out

    for stored in (True, False):
        vector_base.build(tmp_path / str(stored), dim, 1, batches(stored), n, codes=True, ann=False)
    files = sorted(p.name for p in (tmp_path / "True").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "False").iterdir())
    assert {"matrix.i8", vector_base.SCALES, "codes.u64", "order.i32"} <= set(files)
    for name in set(files) - {verify.MANIFEST, "meta.json"}:  # those hold times
        assert (tmp_path / "True" / name).read_bytes() == (tmp_path / "False" / name).read_bytes(), name
    metas = [json.loads((tmp_path / f / "meta.json").read_text()) for f in ("True", "False")]
    for meta in metas:
        del meta["codes"]["seconds"]
    assert metas[0] == metas[1]
    assert (tmp_path / "True" / "matrix.i8").read_bytes() == codes.tobytes()
    assert (tmp_path / "True" / vector_base.SCALES).read_bytes() == scales.tobytes()


@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="shared dev data not found")
def test_an_int8_base_on_a_real_corpus_answers_as_a_float32_matrix_of_the_stored_values(
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
        blobs = [r[0] for r in kb.backend._read("SELECT embedding FROM vec_items ORDER BY rowid", ())]
        stored = codec.matrix_from_stored_blobs(blobs, 384)
        assert np.abs(stored - vectors).max() < 0.01
        folder = generation(db)
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["format"] == vector_base.FORMAT and meta["matrix"] == "i8"
        assert meta["codes"]["rescore"] is not None  # the code pass answers, not an exact scan
        assert not (folder / "matrix.f32").exists() and not (folder / "matrix.f16").exists()
        assert (folder / "matrix.i8").stat().st_size == vectors.size  # a quarter of float32's
        assert (folder / vector_base.SCALES).stat().st_size == 4 * len(vectors)
        got = [kb.backend.vector_search(q, AREA, K) for q in queries]
        base = kb.backend._vectors._base
        assert base is not None and base.approximate
        # the base's bytes are the store's: its int8 rows and scales are the stored blobs'
        assert b"".join(blobs) == b"".join(
            s.tobytes() + c.tobytes() for s, c in zip(np.asarray(base.matrix.scales),
                                                       np.asarray(base.matrix.codes), strict=True))
        half = VectorBase.open(as_float32(folder, stored, tmp_path / "f32"))
        source = kb.backend._vectors.source
        empty = VectorDelta(base.seq, base.seq)
        from_half = [knn(half, empty, q, K, wanted=EVERYTHING) for q in queries]
        from_int8 = [knn(base, empty, q, K, wanted=EVERYTHING, source=source) for q in queries]
        # a search's whole candidate list (its mean and spread scale the calibrated score)
        deep = sum(knn(base, empty, q, 300, wanted=EVERYTHING, source=source)
                   == knn(half, empty, q, 300, wanted=EVERYTHING) for q in queries)
    keys = {int(r): k for k, r in enumerate(np.asarray(base.rowids))}
    recall = []
    for q, hits in zip(queries, got, strict=True):
        rows = np.array([keys[int(key)] for key, _ in hits])
        # the scores are exact on the stored values: what float32 rows of them give, bit for bit
        assert np.array_equal(np.array([s for _, s in hits], np.float32), dot_rows(stored[rows], q))
        kth = np.sort(vectors @ q)[-K]  # numpy's float32 exact top 10 of the original vectors
        recall.append(min(K, int(np.sum(vectors[rows] @ q >= kth - 1e-6))) / K)
    assert float(np.mean(recall)) >= 0.95, np.mean(recall)
    # a float32 matrix's answers, ids and cosines: every query's page, nearly every 300 deep list
    assert from_int8 == from_half
    assert deep >= 0.95 * len(queries), deep
    assert [h for h, _ in zip(from_int8, got, strict=True)] == [[(int(k), s) for k, s in g] for g in got]


def test_rows_changed_after_the_build_are_scored_as_stored_now(tmp_path: Path) -> None:
    vectors = unit(1200, 32, seed=3)
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann="codes") as kb:
        kb.add_many([{"id": f"v{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)])
        kb.optimize()
        sync = kb.backend._vectors
        base = sync._base
        assert base is not None and base.approximate and base.rows_stored
        older = dc_replace(base, rows_stored=False)  # a format 5 base: its best reread from the store
        empty = VectorDelta(base.seq, base.seq)
        before = knn(base, empty, vectors[7], 3, wanted=EVERYTHING)  # no store needed
        assert before == knn(older, empty, vectors[7], 3, wanted=EVERYTHING, source=sync.source)
        assert np.isclose(before[0][1], 1.0, atol=1e-3)
        moved = unit(1, 32, seed=9)[0]
        kb.delete("v7")
        kb.add_many([{"id": "v8", "text": "item 8", "vector": moved}], replace=True)
        # A search's delta holds the changes: the deleted row is gone, the changed one is
        # scored on its new value, whichever way the base scores its own rows.
        _, delta = sync.view(32)
        seven, eight, nine = (int(r) for r in base.rowids[7:10])
        for b in (base, older):
            after = dict(knn(b, delta, vectors[7], 64, wanted=EVERYTHING, source=sync.source))
            assert seven not in after
            assert dict(knn(b, delta, moved, 1, wanted=EVERYTHING, source=sync.source))[eight] \
                == pytest.approx(1.0, abs=2e-3)
        # A change after the search read its delta: an older base's reread sees it; a base
        # holding the stored bytes answers as of that read (the hit's item read drops a
        # deleted row).
        stale = knn(older, empty, vectors[7], 64, wanted=EVERYTHING, source=sync.source)
        assert before[0][0] not in dict(stale)
        again = dict(_rescored(sync.source, 32, vectors[8], [(seven, 1.0), (eight, 1.0), (nine, 0.5)], 3))
        now = kb.backend.vectors_for(["v8", "v9"])  # the stored values
        stored = np.stack([now["v8"], now["v9"]])
        assert np.abs(stored - np.stack([moved, vectors[9]])).max() < 0.01
        assert again == dict(zip([eight, nine], dot_rows(stored, vectors[8]).tolist(), strict=True))
        assert again[eight] < 0.9
        assert kb.backend.vector_search(vectors[7], AREA, 3)[0][1] < 0.99  # the search agrees
        assert kb.backend.vector_search(moved, AREA, 1)[0] == (eight, pytest.approx(1.0, abs=2e-3))
        assert "v7" not in kb.search("item", mode="vector", limit=50).ids


@pytest.mark.parametrize("damaged", ["matrix.i8", vector_base.SCALES])
def test_damage_to_the_int8_files_is_found_and_the_search_answers(tmp_path: Path, damaged: str) -> None:
    vectors = unit(1200, 32, seed=4)
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann="codes") as kb:
        kb.add_many([{"id": f"v{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)])
        kb.optimize()
    path = generation(db) / damaged
    with open(path, "r+b") as f:
        f.seek(1024)
        f.write(b"\x7b" * 2048)
    assert any(damaged in p for p in verify.generation_problems(generation(db), full=True))
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann="codes") as kb:
        assert any(damaged in p["problem"] for p in kb.check()["problems"])
        hits = kb.backend.vector_search(vectors[7], AREA, 3)
        assert hits and np.isclose(hits[0][1], 1.0, atol=1e-3)
        assert not kb.check()["problems"]  # the search built the base again from the items
