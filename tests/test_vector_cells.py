"""The codes' cells (vector_cells.py): a query scans only its nearest cells' codes. The pure
parts against brute force on clustered rows with near-duplicates, then a store on them
against exact answers, with filters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from named import named

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.model import now_ts, parse_filters
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_base, vector_cells, vector_codes, vector_recall
from hybridkb.storage.indexes.vector_math import dot_rows

DIM = 64


def near_duplicates(n: int, seed: int, topics: int = 400, dim: int = DIM) -> np.ndarray:
    """Unit rows: `topics` documents, each repeated with small perturbations (the benchmark's
    shape: the true top 10 of a query is mostly copies of one or two documents)."""
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((topics, dim)).astype(np.float32)
    rows = docs[rng.integers(0, topics, n)] + 0.15 * rng.standard_normal((n, dim)).astype(np.float32)
    out: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def queries_near(m: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Queries as far from the items as pseudo-queries are: sums of a few stored rows."""
    rng = np.random.default_rng(seed)
    summed = m[rng.integers(0, len(m), (count, 3))].sum(axis=1)
    out: np.ndarray = summed / np.linalg.norm(summed, axis=1, keepdims=True)
    return out


def recall_at_10(m: np.ndarray, q: np.ndarray, picks: np.ndarray, allowed: np.ndarray | None = None
                 ) -> float:
    exact = m @ q if allowed is None else np.where(allowed, m @ q, -np.inf)
    kth = np.sort(exact)[-10]
    got = m[picks] @ q
    return min(10, int(np.sum(got >= kth - 1e-6))) / 10


@pytest.fixture(scope="module")
def built() -> tuple[np.ndarray, vector_cells.Cells, np.ndarray, np.ndarray]:
    m = near_duplicates(20_000, 1)
    cells = vector_cells.build(m, len(m))
    center = vector_codes.center_of(m, len(m))
    codes = vector_cells.permute(vector_codes.encode_columns(m, len(m), center), cells)
    return m, cells, center, codes


def test_every_row_is_in_one_cell_and_copies_share_theirs(built: tuple) -> None:
    m, cells, _, _ = built
    wanted = vector_cells.cell_count(len(m))
    assert wanted == round(4 * np.sqrt(20_000))
    assert abs(len(cells.centroids) - wanted) <= np.sqrt(wanted)  # each coarse cell's share rounded
    assert sorted(cells.order.tolist()) == list(range(len(m)))  # a permutation of the rows
    assert cells.offsets[0] == 0 and cells.offsets[-1] == len(m) and np.all(np.diff(cells.offsets) >= 0)
    cell_of = np.empty(len(m), dtype=np.int64)
    cell_of[cells.order] = np.repeat(np.arange(len(cells.centroids)), cells.sizes)
    # each row's cell is one of its two nearest centroids (the two-level assignment is close)
    scores = m @ cells.centroids.T
    best_two = np.argsort(-scores, axis=1)[:, :2]
    assert np.mean((best_two == cell_of[:, None]).any(axis=1)) >= 0.97
    # the copies of one document: most of them in the cell that holds most of them
    nearest_copy = np.argsort(-(m[:200] @ m.T), axis=1)[:, 1]
    assert np.mean(cell_of[:200] == cell_of[nearest_copy]) >= 0.8


def test_kept_counts_each_cells_rows_under_a_mask(built: tuple) -> None:
    m, cells, _, _ = built
    mask = np.random.default_rng(2).random(len(m)) < 0.3
    cell_of = np.empty(len(m), dtype=np.int64)
    cell_of[cells.order] = np.repeat(np.arange(len(cells.centroids)), cells.sizes)
    want = np.bincount(cell_of[mask], minlength=len(cells.centroids))
    assert cells.kept(mask).tolist() == want.tolist()
    empty = vector_cells.Cells(cells.centroids[:3], np.array([0, 0, 2, 2]), np.array([1, 0], np.int32))
    assert empty.kept(np.array([True, False])).tolist() == [0, 1, 0]  # empty cells count 0


def test_a_few_cells_hold_recall_and_scan_a_small_share(built: tuple) -> None:
    m, cells, center, codes = built
    probed = vector_recall.probe(m, len(m))
    found = vector_cells.calibrate(cells, codes, center, m, probed)
    assert found.budget is not None and found.rescore is not None
    assert found.budget <= len(m) // 4  # the cells pruned: not the whole-base scan
    assert found.recall >= 0.95 and found.seconds > 0
    recalls = []
    for q in queries_near(m, 60, 3):  # other queries than the measured ones
        picks, scores = vector_cells.search(cells, codes, center, m, q, found.budget, found.rescore)
        assert np.allclose(scores, m[picks] @ q, atol=1e-6) and np.all(np.diff(picks) > 0)
        recalls.append(recall_at_10(m, q, picks))
    assert np.mean(recalls) >= 0.93, np.mean(recalls)


def test_calibration_says_when_no_pair_holds(built: tuple) -> None:
    m, cells, center, codes = built
    probed = vector_recall.probe(m, len(m))
    found = vector_cells.calibrate(cells, codes, center, m, probed, target=1.01)
    assert found.budget is None and found.rescore is None and found.recall <= 1.0


def test_the_whole_base_budget_is_the_whole_base_code_scan(built: tuple) -> None:
    m, cells, center, codes = built
    q = queries_near(m, 1, 4)[0]
    picks = vector_cells.candidates(cells, codes, center, q, len(m), 500)
    in_base = vector_codes.encode_columns(m, len(m), center)
    dist = vector_codes.distances(in_base, vector_codes.encode(q, center))
    assert sorted(dist[picks].tolist()) == sorted(np.sort(dist)[:500].tolist())


@pytest.mark.parametrize("share", [1.0, 0.3, 0.05])
def test_filters_keep_to_their_rows_and_hold_recall(built: tuple, share: float) -> None:
    m, cells, center, codes = built
    mask = np.random.default_rng(5).random(len(m)) < share
    kept = cells.kept(mask)
    recalls = []
    for q in queries_near(m, 30, 5):
        picks = vector_cells.candidates(cells, codes, center, q, 4096, 512, mask, kept)
        assert len(picks) == 512 and mask[picks].all()
        top = picks[np.argsort(-dot_rows(m, q, picks))[:10]]
        recalls.append(recall_at_10(m, q, top, mask))
    assert np.mean(recalls) >= 0.93, np.mean(recalls)


def test_the_budget_counts_the_rows_a_filter_keeps(built: tuple) -> None:
    """A filter whose rows sit in the cells a query ranks last: the budget is spent on them."""
    m, cells, center, codes = built
    q = queries_near(m, 1, 6)[0]
    mask = np.zeros(len(m), dtype=bool)
    mask[np.argsort(m @ q)[:2000]] = True  # the rows farthest from the query
    picks = vector_cells.candidates(cells, codes, center, q, 1024, 256, mask, cells.kept(mask))
    assert len(picks) == 256 and mask[picks].all()
    scanned = vector_cells.probed(cells, q, 1024, cells.kept(mask))
    assert int(mask[cells.order[scanned]].sum()) >= 1024
    blind = vector_cells.candidates(cells, codes, center, q, 1024, 256, mask)  # counting every row
    assert mask[blind].all() and len(blind) < 256


def test_deep_lists_scan_and_rescore_more() -> None:
    assert vector_cells.effort(2048, 256, 10) == (2048, 256)
    assert vector_cells.effort(2048, 256, 300) == (2048 * 1200 // 256, 1200)
    assert vector_cells.effort(4096, 4096, 10) == (4096, 4096)  # never more rows for as many picks
    assert vector_cells.effort(65_536, 4096, 300) == (65_536, 4096)


def open_kb(path: Path, **options: object) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(DIM), **options)  # type: ignore[arg-type]


def test_a_store_on_cells_answers_exactly_scored_with_filters(tmp_path: Path) -> None:
    kb = open_kb(tmp_path / "kb.db", vector_ann="codes")
    m = near_duplicates(12_000, 6, topics=300)
    kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i],
                  "corpus": "b" if i % 10 == 0 else "a"} for i in range(len(m))])
    report = kb.optimize()
    base, _ = kb.backend._vectors.view(DIM)
    assert base is not None and base.cells is not None and report["first_pass"] == "codes"
    assert base.budget is not None and base.budget < len(m)  # the cells pruned
    assert report["codes_scanned"] == base.budget
    stored = np.stack([codec_stored(v) for v in m])
    recalls, in_b = [], []
    for q in queries_near(m, 40, 7):
        got = vsearch(kb, q)
        rows = np.array([int(i[1:]) for i, _ in got])
        assert np.allclose([s for _, s in got], stored[rows] @ q, atol=1e-6)
        recalls.append(recall_at_10(stored, q, rows))
        b = vsearch(kb, q, corpora=["b"])  # a tenth of the rows: through the cells, masked
        b_rows = np.array([int(i[1:]) for i, _ in b])
        assert len(b) == 10 and np.all(b_rows % 10 == 0)
        in_b.append(recall_at_10(stored, q, b_rows, np.arange(len(m)) % 10 == 0))
    assert np.mean(recalls) >= 0.93 and np.mean(in_b) >= 0.93, (np.mean(recalls), np.mean(in_b))
    kb.close()


def codec_stored(v: np.ndarray) -> np.ndarray:
    from hybridkb.storage import codec

    out: np.ndarray = codec.stored(codec.normalized(v, DIM, label="v"))
    return out


def vsearch(kb: KnowledgeBase, q: np.ndarray, k: int = 10, corpora: list[str] | None = None
            ) -> list[tuple[str, float]]:
    area = SearchArea(tuple(corpora) if corpora else None, parse_filters(None), now_ts())
    return named(kb.backend, kb.backend.vector_search(q, area, k))


def test_the_format_records_the_cells() -> None:
    assert vector_base.FORMAT == 6 and 5 in vector_base.READABLE
    assert set(vector_base.CELL_FILES) <= set(vector_base.MAPPED)
