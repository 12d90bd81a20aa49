"""Ranking metrics as trec_eval computes them. Pure functions.

A run is a best-first list of document ids per query; judgments map a document
id to its graded relevance (> 0 means relevant). nDCG uses the relevance as the
gain with a log2(rank + 1) discount, and the ideal ranking is built from every
judged relevant document (trec_eval's `ndcg_cut`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

Judgments = Mapping[str, int]
Run = Mapping[str, Sequence[str]]
Qrels = Mapping[str, Judgments]


def _first(ranked: Sequence[str], k: int) -> list[str]:
    """The top k, each id once (a repeated id counts at its best rank only)."""
    seen: set[str] = set()
    out: list[str] = []
    for doc in ranked:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
            if len(out) == k:
                break
    return out


def ndcg_at_k(ranked: Sequence[str], judged: Judgments, k: int = 10) -> float:
    gains = sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    if ideal == 0:
        return 0.0
    top = _first(ranked, k)
    dcg = sum(max(judged.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(top))
    return dcg / ideal


def recall_at_k(ranked: Sequence[str], judged: Judgments, k: int = 100) -> float:
    relevant = {doc for doc, rel in judged.items() if rel > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_first(ranked, k))) / len(relevant)


def mrr_at_k(ranked: Sequence[str], judged: Judgments, k: int = 10) -> float:
    for i, doc in enumerate(_first(ranked, k), start=1):
        if judged.get(doc, 0) > 0:
            return 1.0 / i
    return 0.0


METRICS: dict[str, Callable[[Sequence[str], Judgments], float]] = {
    "ndcg@10": lambda ranked, judged: ndcg_at_k(ranked, judged, 10),
    "recall@100": lambda ranked, judged: recall_at_k(ranked, judged, 100),
    "mrr@10": lambda ranked, judged: mrr_at_k(ranked, judged, 10),
}


def per_query(run: Run, qrels: Qrels) -> dict[str, dict[str, float]]:
    """Each metric per query, for every judged query with a relevant document.

    A query missing from the run scores 0 (it is not dropped, unlike trec_eval).
    """
    out: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        if not any(rel > 0 for rel in judged.values()):
            continue
        ranked = run.get(qid, ())
        out[qid] = {name: float(fn(ranked, judged)) for name, fn in METRICS.items()}
    return out


def mean(scores: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric over queries (0.0 when there are none)."""
    n = len(scores)
    return {name: (sum(s[name] for s in scores.values()) / n if n else 0.0) for name in METRICS}


def evaluate(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10, Recall@100 and MRR@10 of a run."""
    return mean(per_query(run, qrels))


THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def min_score_curve(first_hits: Sequence[tuple[float, bool]],
                    thresholds: Sequence[float] = THRESHOLDS) -> dict[str, object]:
    """What `min_score` would do to each query's first hit (its score, relevant or not):
    per threshold, the share of relevant first hits it keeps and of irrelevant ones it
    drops."""
    good = [s for s, relevant in first_hits if relevant]
    bad = [s for s, relevant in first_hits if not relevant]
    curve = {f"{t:g}": {"kept": round(sum(s >= t for s in good) / len(good), 4) if good else None,
                        "dropped": round(sum(s < t for s in bad) / len(bad), 4) if bad else None}
             for t in thresholds}
    return {"relevant": len(good), "irrelevant": len(bad), "curve": curve}
