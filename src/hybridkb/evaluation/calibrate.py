"""Fit the calibration's coefficients (calibration.COEFFICIENTS) on judged pairs.

    python -m hybridkb.evaluation.calibrate --dataset ../shared/data/scifact --split train \\
        --unanswerable ../shared/data/locomo-dev

Indexes the dataset into a fresh store (embeddings from the eval cache), runs each judged
query in each mode and takes its first 50 candidates (DBSF order, collapse and policy off)
with their evidence (hit.evidence) as pairs, relevant or not by the judgments. Queries of
another dataset (`--unanswerable`) and nonsense strings, run over the same store, add
pairs that answer nothing. A logistic regression per mode (Newton's method, a light L2
penalty) gives the intercept and weights, printed as the constant to paste into
calibration.py.
"""

from __future__ import annotations

import argparse
import random
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..calibration import COEFFICIENTS, GATE, Z_FLOOR
from ..embedding import get_embedder
from ..scoring import ScorePolicy
from ..store import KnowledgeBase
from . import runner
from .beir import file_sha256, load
from .cache import EmbeddingCache, PrecomputedQueries, cached_embed, no_progress

FEATURES = ("coverage", "bm25", "vector", "cosine_z")  # as collected; `full` derives from coverage
CODE_WEIGHT = 0.1  # the identifier pairs' weight beside the dataset's
DEPTH = 50  # candidates per query taken as pairs
UNANSWERABLE_DEPTH = 10  # an unanswerable query's first candidates (what it would show)


def nonsense(n: int, seed: int = 7) -> list[str]:
    """Random letter strings of one to three words: queries nothing answers."""
    rng = random.Random(seed)
    return [" ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9)))
                     for _ in range(rng.randint(1, 3))) for _ in range(n)]


def pairs(kb: KnowledgeBase, mode: str, queries: Sequence[tuple[str, dict[str, int]]],
          depth: int, corpus: str | None, base: int = 0) -> tuple[list[list[float]], list[int]]:
    """(features and the query's number from `base`, labels) of each query's first `depth`
    candidates."""
    x: list[list[float]] = []
    y: list[int] = []
    for n, (text, judged) in enumerate(queries):
        result = kb.search(text, mode=mode, limit=depth, corpora=[corpus] if corpus else None,
                           fusion="dbsf",
                           dedup_threshold=None, score_policy=ScorePolicy.off())
        for hit in result.hits:
            x.append([*(hit.evidence.get(f, 0.0) for f in FEATURES), n + base])
            y.append(1 if judged.get(hit.id, 0) > 0 else 0)
    return x, y


def features(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The model's inputs from the collected columns, as calibration.logit reads them:
    coverage, bm25, the counted vector (gated by cosine z), z above Z_FLOOR, full."""
    low, high = GATE
    gate = np.clip((x[:, 3] - low) / (high - low), 0.0, 1.0)
    out: np.ndarray[Any, Any] = np.c_[x[:, :2], x[:, 2] * gate, np.maximum(x[:, 3] - Z_FLOOR, 0.0),
                                      (x[:, 0] >= 1 - 1e-9).astype(float)]
    return out


def fit(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], l2: float = 1e-3,
        used: Sequence[bool] | None = None,
        weights: np.ndarray[Any, Any] | None = None) -> tuple[float, ...]:
    """Logistic regression by Newton's method: (intercept, *weights); unused features 0."""
    used = used if used is not None else (True,) * x.shape[1]
    cols = [i for i, u in enumerate(used) if u]
    a = np.hstack([np.ones((len(x), 1)), x[:, cols]])
    sw = np.ones(len(y)) if weights is None else weights
    w = np.zeros(a.shape[1])
    for _ in range(60):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -30, 30)))
        grad = a.T @ (sw * (p - y)) + l2 * np.r_[0.0, w[1:]]
        hess = (a * (sw * p * (1 - p))[:, None]).T @ a + l2 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    out = [float(w[0])] + [0.0] * x.shape[1]
    for j, i in enumerate(cols):
        out[1 + i] = float(w[1 + j])
    return tuple(round(v, 4) for v in out)


# Which features each kind of search uses (calibration.COEFFICIENTS' order).
USED = {"hybrid": (True,) * 5, "fts": (True, True, False, False, True),
        "vector": (False, False, True, True, False)}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", action="append", required=True,
                    help="a BEIR folder whose judged queries give pairs (repeatable)")
    ap.add_argument("--split", action="append", default=[],
                    help="its qrels split (one, or one per --dataset; default train)")
    ap.add_argument("--unanswerable", action="append", default=[],
                    help="a BEIR folder whose queries this dataset cannot answer")
    ap.add_argument("--max-queries", type=int)
    ap.add_argument("--code", action="append", default=[], help="also the identifier pairs of "
                    "these installed packages (see identifiers.py; not the ones it evaluates)")
    ap.add_argument("--pairs", help="an .npz file: read the pairs from it if it exists, else "
                    "write them there")
    args = ap.parse_args(argv)
    if args.pairs and Path(args.pairs).exists():
        saved = np.load(args.pairs)
        x, y, sw = saved["x"], saved["y"], saved["w"]
    else:
        x, y, sw = collect(args)
        if args.pairs:
            np.savez(args.pairs, x=x, y=y, w=sw)
    fitted = {mode: fit(features(x), y, used=used, weights=sw) for mode, used in USED.items()}
    print(f"{len(y)} pairs, {int(y.sum())} relevant")
    print("COEFFICIENTS = {")
    for mode, coef in fitted.items():
        print(f"    {mode!r}: {coef},  # was {COEFFICIENTS[mode]}")
    print("}")


def collect(args: argparse.Namespace
            ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Pairs of one hybrid search per query: every kind is fitted on them (the features of
    a BM25-only or vector-only search are the same numbers). Each dataset is its own store;
    the unanswerable queries run over the first."""
    model = get_embedder("minilm")
    assert model is not None
    cache = EmbeddingCache()
    splits = args.split or ["train"]
    if len(splits) not in (1, len(args.dataset)):
        raise SystemExit("--split: one, or one per --dataset")
    xs: list[list[float]] = []
    ys: list[int] = []
    for n, folder in enumerate(args.dataset):
        split = splits[n] if len(splits) > 1 else splits[0]
        x, y = dataset_pairs(folder, split, args, model, cache, next_query(xs),
                             unanswerable=n == 0)
        xs += x
        ys += y
    x3, y3 = code_pairs(args.code, model, cache, next_query(xs)) if args.code else ([], [])
    weights = np.r_[np.ones(len(ys)), np.full(len(y3), CODE_WEIGHT)]
    return (np.asarray(xs + x3, dtype=float), np.asarray(ys + y3, dtype=float), weights)


def next_query(x: Sequence[Sequence[float]]) -> int:
    """The number the next query's pairs take (pairs carry their query's number last)."""
    return int(x[-1][-1]) + 1 if x else 0


def dataset_pairs(folder: str, split: str, args: argparse.Namespace, model: Any,
                  cache: EmbeddingCache, base: int,
                  unanswerable: bool) -> tuple[list[list[float]], list[int]]:
    """The pairs of one dataset's judged queries over a store of its corpus (and, with
    `unanswerable`, of the nonsense strings and other sets' queries over it)."""
    data = load(folder, split)
    queries = data.queries[: args.max_queries] if args.max_queries else list(data.queries)
    others: list[str] = nonsense(100) if unanswerable else []
    for other_folder in args.unanswerable if unanswerable else []:
        other = load(other_folder, "test")
        others.extend(q.text for q in other.queries[:200])
    vectors = runner.embed(model, data, queries, cache, no_progress)
    qv = dict(vectors.queries)
    if others:
        extra = cached_embed(model, kind="queries", source_sha=file_sha256(data.queries_file),
                             ids=[f"u{i}" for i in range(len(others))], texts=others,
                             cache=cache)
        qv.update(zip(others, extra.vectors, strict=True))
    searcher = PrecomputedQueries(model, qv)
    corpus = f"beir-{data.name}"
    judged = [(q.text, data.qrels[q.id]) for q in queries]
    with runner._target(None) as target, runner._open(target, searcher, None) as kb:
        runner._index(kb, data, corpus, vectors.docs, no_progress)
        x, y = pairs(kb, "hybrid", judged, DEPTH, corpus, base)
        x2, y2 = pairs(kb, "hybrid", [(text, {}) for text in others], UNANSWERABLE_DEPTH,
                       corpus, base + len(judged))
    return x + x2, y + y2


def code_pairs(packages: Sequence[str], model: Any, cache: EmbeddingCache,
               base: int) -> tuple[list[list[float]], list[int]]:
    """Pairs of the identifier queries of `packages` over a store of their source."""
    from . import identifiers

    folders = {name: identifiers.package_folder(name) for name in packages}
    coded = identifiers.code_vectors(model, cache, folders)
    with runner._target(None) as target:
        with runner._open(target, coded, None) as kb:
            chunks, defs = identifiers.index_packages(kb, folders)
        qrels = identifiers.judgments(chunks, defs)
        with runner._open(target, coded, None) as kb:
            x: list[list[float]] = []
            y: list[int] = []
            for n, name in enumerate(sorted(qrels)):
                xs, ys = pairs(kb, "hybrid", [(name, qrels[name])], DEPTH, None, base + n)
                x += xs
                y += ys
    return x, y


if __name__ == "__main__":
    main()
