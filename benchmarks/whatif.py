"""What would meet the targets: the hybrid path re-measured with parts swapped in
by patching, beside the unchanged path, in the same process and rounds.

- fast dedup: `dedup.collapse` itself, with token sets memoized by text (a hybrid
  search collapses its FTS and its vector list, which share items; popular items
  recur across searches). The output is checked equal to the library's on every query.
- in-memory BM25: `text_search` answered by an eager sparse BM25 index held in
  memory beside the database (bm25s over the store's title + text), the way the
  vector path keeps a matrix beside `vec0`. Its tokenizer is not FTS5's porter
  one, so this is a latency estimate, not a drop-in.
- dedup off: `search(dedup_threshold=None)`, an existing option: the path without collapse.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import lru_cache
from typing import Any

from hybridkb import dedup
from hybridkb.store import KnowledgeBase

from .baselines import BM25Baseline
from .measure import ratios, stats
from .stages import patched

_library_tokens = dedup.tokens  # captured before the what-if patches dedup.tokens


@lru_cache(maxsize=8192)
def _tokens(text: str) -> frozenset[str]:
    return _library_tokens(text)


class MemoryBM25:
    """text_search from an in-memory bm25s index over the store's items (one corpus,
    no filters: what the benchmark searches). `index` covers the items `keys` name (the
    store's keys for them: SQLite's rowids), in order."""

    def __init__(self, keys: Sequence[int | str], index: BM25Baseline) -> None:
        self.keys = list(keys)
        self.index = index

    def text_search(self, query: Any, scope: Any, limit: int) -> list[tuple[int | str, float]]:
        words = " ".join(query.words)
        return [(self.keys[i], 1.0 / (1 + r)) for r, i in enumerate(self.index.search(words, limit))]


def measure(kb: KnowledgeBase, queries: Sequence[str], baseline_seconds: Sequence[float],
            memory: MemoryBM25, *, limit: int = 10, warmup: int = 10) -> dict[str, Any]:
    """Hybrid latency as it is and with parts swapped, interleaved per query, plus FTS
    and vector mode variants; `baseline_seconds` is numpy + bm25s per query."""
    variants: dict[str, tuple[bool, bool, bool]] = {  # fast dedup, in-memory BM25, dedup off
        "as is": (False, False, False), "fast dedup": (True, False, False),
        "in-memory BM25": (False, True, False),
        "fast dedup + in-memory BM25": (True, True, False),
        "dedup off": (False, False, True), "dedup off + in-memory BM25": (False, True, True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    fts_times: dict[str, list[float]] = {"as is": [], "in-memory BM25": []}
    vector_times: dict[str, list[float]] = {"as is": [], "fast dedup": [], "dedup off": []}
    differing = 0

    def search(fast: bool, mem: bool, off: bool, query: str,
               mode: str = "hybrid") -> tuple[Any, float]:
        with ExitStack() as stack:
            if fast:
                stack.enter_context(patched(dedup, "tokens", _tokens))
            if mem:
                stack.enter_context(patched(kb.backend, "text_search", memory.text_search))
            start = time.perf_counter()
            if off:
                result = kb.search(query, mode=mode, limit=limit, dedup_threshold=None)
            else:
                result = kb.search(query, mode=mode, limit=limit)
            return result, time.perf_counter() - start

    for q in queries[:warmup]:
        for flags in variants.values():
            search(*flags, q)
    def answer(result: Any) -> list[Any]:
        return [(h.id, h.score, [a["id"] for a in h.alternate_sources]) for h in result.hits]

    for q in queries:
        answers = {}
        for name, flags in variants.items():
            result, seconds = search(*flags, q)
            times[name].append(seconds)
            answers[name] = answer(result)
        # The text index may fold or merge between two searches (deleted documents leave
        # BM25's statistics), moving every score a little: a difference counts only if the
        # unchanged path, asked again, still disagrees.
        if answers["as is"] != answers["fast dedup"] and \
                answer(search(False, False, False, q)[0]) != answers["fast dedup"]:
            differing += 1
        fts_times["as is"].append(search(False, False, False, q, "fts")[1])
        fts_times["in-memory BM25"].append(search(False, True, False, q, "fts")[1])
        vector_times["as is"].append(search(False, False, False, q, "vector")[1])
        vector_times["fast dedup"].append(search(True, False, False, q, "vector")[1])
        vector_times["dedup off"].append(search(False, False, True, q, "vector")[1])
    base = stats(baseline_seconds)
    hybrid = {name: {**stats(v), "ratio_to_numpy+bm25s": ratios(stats(v), base)}
              for name, v in times.items()}
    return {
        "hybrid": hybrid,
        "fts": {name: stats(v) for name, v in fts_times.items()},
        "vector": {name: stats(v) for name, v in vector_times.items()},
        "fast_dedup_results_differ_on": differing,
        "note": "in-memory BM25 uses bm25s's tokenizer (no porter stemming, no filters): "
                "a latency estimate",
    }



def binary_prefilter(vectors: Any, query_vectors: Any, exact: Any, *, k: int = 10,
                     rescore: Sequence[int] = (200, 1000)) -> dict[str, Any]:
    """Exact search scans every float; a 1-bit sign code per dimension scans 32x fewer
    bytes. Hamming distance over the codes picks `rescore` candidates, exact cosine
    ranks them. Latency and recall@k against the exact top k, per query, interleaved
    with the exact baseline. Not in hybridkb: what an approximate first pass would buy."""
    import numpy as np

    codes = np.packbits(np.asarray(vectors) > 0, axis=1)
    pad = (-codes.shape[1]) % 8
    if pad:
        codes = np.pad(codes, ((0, 0), (0, pad)))
    words = np.ascontiguousarray(codes).view(np.uint64)
    matrix = exact.matrix
    out: dict[str, Any] = {}
    base: list[float] = []
    runs: dict[int, tuple[list[float], list[float]]] = {r: ([], []) for r in rescore}
    for q in query_vectors:
        start = time.perf_counter()
        truth = exact.search(q, k)
        base.append(time.perf_counter() - start)
        for r, (times, recalls) in runs.items():
            start = time.perf_counter()
            qcode = np.packbits(q > 0)
            qcode = np.pad(qcode, (0, pad)) if pad else qcode
            distance = np.bitwise_count(words ^ qcode.view(np.uint64)).sum(axis=1)
            n = min(r, distance.size)
            cand = np.argpartition(distance, n - 1)[:n] if n < distance.size else np.arange(n)
            scores = matrix[cand] @ q
            top = cand[np.argsort(-scores)[:k]]
            times.append(time.perf_counter() - start)
            recalls.append(len(set(top.tolist()) & set(truth)) / max(1, len(truth)))
    b = stats(base)
    for r, (times, recalls) in runs.items():
        s = stats(times)
        out[f"rescore {r}"] = {**s, "ratio_to_numpy": ratios(s, b),
                               f"recall@{k}": round(float(np.mean(recalls)), 4)}
    out["numpy exact"] = b
    return out
