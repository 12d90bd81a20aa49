"""Rank fusion of retriever lists. Pure functions: plain values in, new values out.

Every list is ordered best first. Scored lists carry a raw score where higher is
better (backends turn BM25 and cosine distance into that form).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .errors import InvalidInputError
from .model import Key

RRF_K = 60  # Cormack, Clarke & Büttcher (2009): k = 60, ranks 1-based.

# The search defaults (fusion, and weights for fts and vector), chosen by the evaluation
# harness: see docs/quality.md for the measurements behind them. "calibrated" ranks by
# the calibrated relevance of each candidate (calibration.py; run by the pipeline, which
# holds the texts it reads); the weights apply to the rank fusions.
DEFAULT_FUSION = "calibrated"
DEFAULT_WEIGHTS = (0.6, 0.4)
# How a search over several corpora merges them: "relevance" (one list per retriever over
# all of them, fused once, so hits compete on comparable scores) or "rrf" (each corpus
# fused apart, then interleaved by rank: each corpus gets equal say).
MERGES = ("relevance", "rrf")
DEFAULT_MERGE = "relevance"

Ranked = Sequence[Key]
Scored = Sequence[tuple[Key, float]]
Fused = list[tuple[Key, float]]


def _check_weights(n_lists: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n_lists
    if len(weights) != n_lists:
        raise InvalidInputError(f"{len(weights)} weights given for {n_lists} lists")
    out = [float(w) for w in weights]
    if any(not math.isfinite(w) or w < 0 for w in out):
        raise InvalidInputError(f"weights must be finite and >= 0: {list(weights)}")
    return out


def _sorted(scores: dict[Key, float]) -> Fused:
    """Descending score, ties broken by id so pages are stable."""
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def rrf(lists: Sequence[Ranked], *, k: float = RRF_K, weights: Sequence[float] | None = None) -> Fused:
    """Weighted Reciprocal Rank Fusion: score(d) = Σ w_i / (k + rank_i(d)), ranks from 1."""
    if not k > 0 or not math.isfinite(k):
        raise InvalidInputError(f"RRF k must be a positive number, got {k!r}")
    ws = _check_weights(len(lists), weights)
    scores: dict[Key, float] = {}
    for w, ranked in zip(ws, lists, strict=True):
        seen: set[Key] = set()
        for rank, doc in enumerate(ranked, start=1):
            if doc in seen:  # a duplicate id in one list counts once, at its best rank
                continue
            seen.add(doc)
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return _sorted(scores)


def _minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [1.0] * len(values)
    return [(s - lo) / (hi - lo) for s in values]


def _distribution(values: list[float]) -> list[float]:
    """DBSF normalization: map mean ± 3σ of the list's scores onto [0, 1].

    Not clipped: BM25 lists are heavy-tailed, and clipping the head at mean + 3σ
    would erase the differences between the strongest matches.
    """
    mean = sum(values) / len(values)
    std = math.sqrt(sum([(v - mean) ** 2 for v in values]) / len(values))
    if std <= 1e-12:
        return [0.5] * len(values)
    lo, span = mean - 3 * std, 6 * std
    return [(s - lo) / span for s in values]


def _normalized_sum(
    lists: Sequence[Scored], weights: Sequence[float] | None,
    normalize: Callable[[list[float]], list[float]], top: int | None = None,
) -> tuple[Fused, float]:
    """The weighted sum of the normalized lists, and the best fused score possible (the sum
    of each list's normalized first score), from one normalization of each list. With
    `top`, only the first `top` fused entries (and any tied with the last) are returned."""
    ws = _check_weights(len(lists), weights)
    scores: dict[Key, float] = {}
    tops: list[float] = []
    for w, scored in zip(ws, lists, strict=True):
        ids, values = _first_occurrences(scored)
        if not ids:
            continue
        weighted = [w * s for s in normalize(values)]
        if scores:
            for doc, s in zip(ids, weighted, strict=True):
                scores[doc] = scores.get(doc, 0.0) + s
        else:  # 0.0 + s, as summing into an empty dict would (0.0 + -0.0 is 0.0)
            scores = dict(zip(ids, [0.0 + s for s in weighted], strict=True))
        tops.append(weighted[0])
    return (_sorted(scores) if top is None else _head(scores, top)), sum(tops)


def _head(scores: dict[Key, float], top: int) -> Fused:
    """`_sorted(scores)` cut after its first `top` entries (later when scores tie there):
    only the entries scoring at least the `top`-th best score are sorted by (score, id)."""
    if len(scores) <= top:
        return _sorted(scores)
    floor = sorted(scores.values(), reverse=True)[top - 1]
    return _sorted({doc: s for doc, s in scores.items() if s >= floor})


def _first_occurrences(scored: Scored) -> tuple[list[Key], list[float]]:
    """Ids and scores, each id once at its first place, non-finite scores left out."""
    ids = [doc for doc, _ in scored]
    values = [s for _, s in scored]
    if len(set(ids)) == len(ids) and math.isfinite(sum(values)):  # the usual list: as it is
        return ids, values
    seen: set[Key] = set()
    ids, values = [], []
    for doc, s in scored:
        if doc not in seen and math.isfinite(s):
            seen.add(doc)
            ids.append(doc)
            values.append(s)
    return ids, values


def convex(lists: Sequence[Scored], *, weights: Sequence[float] | None = None) -> Fused:
    """Min-max normalize each list's scores to [0, 1], then sum them with weights."""
    return _normalized_sum(lists, weights, _minmax)[0]


def dbsf(lists: Sequence[Scored], *, weights: Sequence[float] | None = None) -> Fused:
    """Distribution-based score fusion: each list normalized by mean ± 3σ, then summed."""
    return _normalized_sum(lists, weights, _distribution)[0]


FUSIONS = ("calibrated", "rrf", "convex", "dbsf")
RANK_FUSIONS = ("rrf", "convex", "dbsf")  # what `fuse` computes from the lists alone


def fuse(
    method: str, lists: Sequence[Scored], *, weights: Sequence[float] | None = None,
    k: float = RRF_K,
) -> Fused:
    """Dispatch by name; `lists` carry scores, which RRF ignores."""
    if method == "rrf":
        return rrf([[doc for doc, _ in scored] for scored in lists], k=k, weights=weights)
    if method == "convex":
        return convex(lists, weights=weights)
    if method == "dbsf":
        return dbsf(lists, weights=weights)
    raise InvalidInputError(f"unknown fusion {method!r}; choose one of {', '.join(RANK_FUSIONS)}")


def best_possible(
    method: str, lists: Sequence[Scored], *, weights: Sequence[float] | None = None,
    k: float = RRF_K,
) -> float:
    """The fused score of an item ranked first in every list: what `min_score` divides by."""
    return fuse_with_best(method, lists, weights=weights, k=k)[1]


def fuse_with_best(
    method: str, lists: Sequence[Scored], *, weights: Sequence[float] | None = None,
    k: float = RRF_K, top: int | None = None,
) -> tuple[Fused, float]:
    """`fuse` and `best_possible` together, each list normalized once (a search needs both).
    `top` may cut the fused list to its first `top` entries (more when scores tie there);
    a search reads only that far."""
    if method in ("convex", "dbsf"):
        return _normalized_sum(lists, weights, _minmax if method == "convex" else _distribution,
                               top)
    fused = fuse(method, lists, weights=weights, k=k)  # rrf, or an unknown name's error
    ws = _check_weights(len(lists), weights)
    return fused, sum(w for w, scored in zip(ws, lists, strict=True) if scored) / (k + 1)
