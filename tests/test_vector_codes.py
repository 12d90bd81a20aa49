"""One-bit codes as the vector base's first pass (vector_codes.py): the pure parts against
brute force, then a store forced onto them (`vector_ann="codes"`) against exact answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from named import named

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.model import now_ts, parse_filters
from hybridkb.storage import codec
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_base, vector_codes, vector_recall
from hybridkb.storage.indexes.vector_math import dot_rows

DIM = 96  # two words a code, the second half used


def clustered(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Unit rows around 40 centres: neighbours that matter, as real embeddings have."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, dim)).astype(np.float32)
    rows = centres[rng.integers(0, 40, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    out: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def test_distances_are_hamming_distances_of_the_centered_signs() -> None:
    m = clustered(500, 1)
    center = vector_codes.center_of(m, len(m))
    columns = vector_codes.encode_columns(m, len(m), center)
    assert columns.shape == (2, 500) and columns.dtype == np.uint64
    q = clustered(1, 2)[0]
    bits = (m > center).astype(np.int8)
    want = np.abs(bits - (q > center).astype(np.int8)).sum(axis=1)
    got = vector_codes.distances(columns, vector_codes.encode(q, center))
    assert got.tolist() == want.tolist()
    assert int(vector_codes.distances(columns, vector_codes.encode(m[17], center))[17]) == 0


@pytest.mark.parametrize(("setting", "value"), [("PARALLEL_ROWS", 100), ("SPAN", 7)])
def test_the_scan_split_over_threads_or_spans_equals_one_pass(
    monkeypatch: pytest.MonkeyPatch, setting: str, value: int,
) -> None:
    """Two threads, or spans that do not divide the rows, give the one-pass distances."""
    m = clustered(1001, 11)
    center = vector_codes.center_of(m, len(m))
    columns = vector_codes.encode_columns(m, len(m), center)
    code = vector_codes.encode(clustered(1, 12)[0], center)
    one = vector_codes.distances(columns, code)
    monkeypatch.setattr(vector_codes, setting, value)
    assert vector_codes.distances(columns, code).tolist() == one.tolist()


def test_a_forked_child_scans_with_a_pool_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.setattr(vector_codes, "PARALLEL_ROWS", 100)
    m = clustered(1000, 13)
    center = vector_codes.center_of(m, len(m))
    columns = vector_codes.encode_columns(m, len(m), center)
    code = vector_codes.encode(m[3], center)
    vector_codes.distances(columns, code)  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        child = pool.apply_async(_nearest_in_child, (columns, code)).get(timeout=60)
    assert child == 3


def _nearest_in_child(columns: np.ndarray, code: np.ndarray) -> int:
    vector_codes.PARALLEL_ROWS = 100  # the child is a copy of the parent, patch included
    return int(np.argmin(vector_codes.distances(columns, code)))


def test_closest_takes_exactly_the_smallest_with_ties_to_lower_positions() -> None:
    dist = np.array([5, 1, 3, 1, 3, 3, 0, 9], dtype=np.uint16)
    assert vector_codes.closest(dist, 1).tolist() == [6]
    assert vector_codes.closest(dist, 3).tolist() == [1, 3, 6]
    assert vector_codes.closest(dist, 4).tolist() == [1, 2, 3, 6]  # first of the three 3s
    assert vector_codes.closest(dist, 5).tolist() == [1, 2, 3, 4, 6]
    assert vector_codes.closest(dist, 20).tolist() == list(range(8))


def test_search_keeps_to_the_mask_and_scores_exactly() -> None:
    m = clustered(2000, 3)
    center = vector_codes.center_of(m, len(m))
    columns = vector_codes.encode_columns(m, len(m), center)
    mask = np.arange(2000) % 3 == 0
    q = clustered(1, 4)[0]
    picks, scores = vector_codes.search(columns, center, m, q, 100, mask)
    assert len(picks) == 100 and mask[picks].all()
    assert np.allclose(scores, m[picks] @ q, atol=1e-6)  # float32 sums in another order
    few = np.zeros(2000, dtype=bool)
    few[[5, 50, 500]] = True
    picks, _ = vector_codes.search(columns, center, m, q, 100, few)
    assert picks.tolist() == [5, 50, 500]  # never a row the mask drops, however deep


def test_calibration_reaches_the_target_or_says_it_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    m = clustered(20_000, 5)
    center = vector_codes.center_of(m, len(m))
    columns = vector_codes.encode_columns(m, len(m), center)
    probed = vector_recall.probe(m, len(m))
    found = vector_codes.calibrate(columns, center, m, probed)
    assert found.rescore in vector_codes.RESCORE_LADDER and found.recall >= 0.95 and found.seconds > 0
    monkeypatch.setattr(vector_codes, "RESCORE_LADDER", (16, 32))
    short = vector_codes.calibrate(columns, center, m, probed)
    assert short.rescore is None and short.recall < 0.95


def test_the_faster_measured_pass_is_used() -> None:
    codes = {"codes": {"rescore": 512, "recall": 0.97, "seconds": 0.002}}
    pick = vector_base._first_pass
    assert pick({**codes, "graph_seconds": 0.001}, graph=True, codes=True) == "graph"
    assert pick({**codes, "graph_seconds": 0.004}, graph=True, codes=True) == "codes"
    assert pick(codes, graph=True, codes=True) == "codes"  # a graph without a measured time
    assert pick(codes, graph=False, codes=True) == "codes"
    assert pick({}, graph=False, codes=False) is None


def open_kb(path: Path, **options: object) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(DIM), **options)  # type: ignore[arg-type]


def vsearch(kb: KnowledgeBase, q: np.ndarray, k: int = 10, corpora: list[str] | None = None
            ) -> list[tuple[str, float]]:
    area = SearchArea(tuple(corpora) if corpora else None, parse_filters(None), now_ts())
    return named(kb.backend, kb.backend.vector_search(q, area, k))


def test_a_store_on_codes_holds_recall_with_exact_scores_and_filters(tmp_path: Path) -> None:
    kb = open_kb(tmp_path / "kb.db", vector_ann="codes")
    rows = clustered(4040, 6)
    m, queries = rows[:4000], rows[4000:]  # queries on the stored topics, not stored themselves
    kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i], "corpus": "a" if i % 4 else "b"}
                 for i in range(len(m))])
    report = kb.optimize()
    assert report["first_pass"] == "codes" and report["graph"] is False
    assert report["codes_rescore"] in vector_codes.RESCORE_LADDER and report["codes_recall"] >= 0.95
    recalls = []
    for q in queries:
        exact = np.lexsort((np.arange(len(m)), -(m @ q)))[:10]
        got = vsearch(kb, q)
        recalls.append(len({f"v{i}" for i in exact} & {i for i, _ in got}) / 10)
        for item_id, score in got:
            kept = codec.stored(codec.normalized(m[int(item_id[1:])], DIM, label="v"))
            assert score == pytest.approx(float(kept @ q), abs=1e-6)
        in_b = vsearch(kb, q, corpora=["b"])  # a quarter of the rows: through the codes, masked
        assert len(in_b) == 10 and all(int(i[1:]) % 4 == 0 for i, _ in in_b)
    assert np.mean(recalls) >= 0.95
    kb.close()


def test_writes_after_the_base_are_found_and_deleted_rows_are_not(tmp_path: Path) -> None:
    kb = open_kb(tmp_path / "kb.db", vector_ann="codes")
    m = clustered(3000, 8)
    kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i]} for i in range(len(m))])
    kb.optimize()
    fresh = clustered(1, 9)[0]
    kb.add_many([{"id": "new", "text": "new", "vector": fresh}])
    kb.delete_many(["v11"])
    assert vsearch(kb, fresh)[0][0] == "new"
    assert all(i != "v11" for i, _ in vsearch(kb, m[11], 50))
    assert vsearch(kb, m[12])[0][0] == "v12"
    kb.close()


def test_a_truncated_codes_file_is_reported_and_rebuilt(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    kb = open_kb(db, vector_ann="codes")
    m = clustered(1000, 10)
    kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i]} for i in range(len(m))])
    kb.optimize()
    kb.close()
    codes = next((tmp_path / "kb.db.idx" / "vectors").rglob("codes.u64"))
    codes.write_bytes(codes.read_bytes()[:100])
    kb = open_kb(db, vector_ann="codes")
    problems = kb.check()["problems"]
    assert any("vector index" in p["problem"] and "damaged" in p["problem"] for p in problems), problems
    assert vsearch(kb, m[42])[0][0] == "v42"  # answered from a rebuilt base
    base, _ = kb.backend._vectors.view(DIM)
    assert base is not None and base.first_pass == "codes"
    kb.close()


def test_dot_rows_equals_the_matrix_product_for_every_input_the_indexes_pass() -> None:
    m = clustered(300, 5)
    q = clustered(1, 6)[0]
    assert np.allclose(dot_rows(m, q), m @ q, atol=1e-6)
    assert dot_rows(m, q).dtype == np.float32
    assert np.allclose(dot_rows(m[[3, 1, 2]], q.reshape(1, -1)), m[[3, 1, 2]] @ q, atol=1e-6)
    assert np.allclose(dot_rows(m.astype(np.float64), q.astype(np.float64)), m @ q, atol=1e-6)
    assert dot_rows(m[:0], q).shape == (0,)


@pytest.mark.parametrize("size", [300, 70_000, 200_000])
def test_closest_equals_a_stable_sort_on_long_arrays_and_heavy_ties(size: int) -> None:
    """The sampled bound (past 65,536 rows) and the tie rule, against the definition: the
    first `count` positions of a stable sort by distance, in position order."""
    rng = np.random.default_rng(size)
    for spread in (3, 40, 385):
        dist = rng.integers(0, spread, size).astype(np.uint16)
        if spread == 385:  # a clustered head: a few rows far nearer than the rest
            dist[rng.integers(0, size, 50)] = rng.integers(0, 5, 50)
        for count in (1, 10, 257, 4096, size - 1):
            want = np.sort(np.argsort(dist, kind="stable")[:count])
            got = vector_codes.closest(dist, count)
            assert got.dtype == np.int64 and got.tolist() == want.tolist(), (spread, count)

