import math

import pytest

from hybridkb.errors import InvalidInputError
from hybridkb.fusion import best_possible, convex, dbsf, fuse, rrf


def test_seed_example_exact() -> None:
    fused = rrf([["A", "B", "C"], ["B", "D", "A"]], k=60)
    assert [d for d, _ in fused] == ["B", "A", "D", "C"]
    # The seed's figures are given to five places.
    assert [s for _, s in fused] == pytest.approx([0.03252, 0.03226, 0.01613, 0.01587], abs=1e-5)
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)


def test_single_list_scores_by_position() -> None:
    fused = rrf([["x", "y", "z"]])
    assert fused == [("x", 1 / 61), ("y", 1 / 62), ("z", 1 / 63)]


def test_items_in_two_lists_sum() -> None:
    fused = dict(rrf([["a", "b"], ["b"]]))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61)


def test_three_lists_merge() -> None:
    fused = rrf([["a"], ["b"], ["a", "c"]])
    assert [d for d, _ in fused] == ["a", "b", "c"]


def test_empty_lists_give_empty_result() -> None:
    assert rrf([]) == []
    assert rrf([[], []]) == []
    assert dbsf([[], []]) == []
    assert convex([]) == []


def test_ties_broken_by_id() -> None:
    fused = rrf([["b", "a"], ["a", "b"]])
    assert fused[0][1] == fused[1][1]
    assert [d for d, _ in fused] == ["a", "b"]


def test_weights_change_order() -> None:
    lists = [["a", "b"], ["b", "a"]]
    assert rrf(lists, weights=[2.0, 1.0])[0][0] == "a"
    assert rrf(lists, weights=[1.0, 2.0])[0][0] == "b"


@pytest.mark.parametrize("k", [0, -1, math.inf, math.nan])
def test_bad_k_is_clear_error(k: float) -> None:
    with pytest.raises(InvalidInputError, match="k"):
        rrf([["a"]], k=k)


def test_wrong_weight_count_is_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="weights"):
        rrf([["a"], ["b"]], weights=[1.0])
    with pytest.raises(InvalidInputError):
        dbsf([[("a", 1.0)]], weights=[1.0, 2.0])


def test_inputs_not_mutated() -> None:
    lists = [["a", "b"], ["c"]]
    snapshot = [list(x) for x in lists]
    rrf(lists)
    assert lists == snapshot


def test_convex_minmax() -> None:
    fused = dict(convex([[("a", 10.0), ("b", 5.0), ("c", 0.0)], [("c", 0.9), ("a", 0.1)]],
                        weights=[0.5, 0.5]))
    assert fused["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.0)
    assert fused["b"] == pytest.approx(0.5 * 0.5)
    assert fused["c"] == pytest.approx(0.5 * 0.0 + 0.5 * 1.0)


def test_dbsf_uses_mean_and_three_sigma() -> None:
    scores = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    fused = dict(dbsf([scores]))
    mean, std = 2.0, math.sqrt(2 / 3)
    assert fused["b"] == pytest.approx(0.5)
    assert fused["a"] == pytest.approx((3.0 - (mean - 3 * std)) / (6 * std))


def test_dbsf_score_gap_matters_where_rrf_sees_only_ranks() -> None:
    # List 1 is confident about "a"; list 2 is nearly flat. RRF ties a and b; DBSF prefers a.
    l1 = [("a", 10.0), ("b", 1.0), ("x", 0.9), ("y", 0.8)]
    l2 = [("b", 0.51), ("a", 0.50), ("x", 0.49), ("y", 0.48)]
    assert dict(fuse("rrf", [l1, l2]))["a"] == pytest.approx(dict(fuse("rrf", [l1, l2]))["b"])
    assert fuse("dbsf", [l1, l2])[0][0] == "a"


def test_unknown_fusion() -> None:
    with pytest.raises(InvalidInputError, match="unknown fusion"):
        fuse("nope", [[("a", 1.0)]])


def test_best_possible_is_an_item_first_everywhere() -> None:
    l1 = [("a", 9.0), ("b", 3.0), ("c", 1.0)]
    l2 = [("b", 0.8), ("c", 0.5), ("a", 0.1)]
    for method in ("rrf", "convex", "dbsf"):
        best = best_possible(method, [l1, l2], weights=[0.6, 0.4])
        top = fuse(method, [l1, l2], weights=[0.6, 0.4])[0][1]
        assert top <= best + 1e-12
        # An extra item ranked first in both lists reaches exactly the bound.
        lifted = [[("z", 10.0), *l1], [("z", 0.9), *l2]]
        assert fuse(method, lifted, weights=[0.6, 0.4])[0] == (
            "z", pytest.approx(best_possible(method, lifted, weights=[0.6, 0.4])))
    assert best_possible("rrf", [l1, []]) == pytest.approx(1 / 61)


def test_dbsf_default_weights_favour_keywords_on_disagreement() -> None:
    fts = [("kw", 12.0), ("x1", 4.0), ("x2", 3.5), ("x3", 3.0)]
    vec = [("sem", 0.62), ("x1", 0.60), ("x2", 0.58), ("kw", 0.40)]
    assert fuse("dbsf", [fts, vec], weights=[0.6, 0.4])[0][0] == "kw"
