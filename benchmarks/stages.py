"""Where a search's time goes: wall-clock per stage of `kb.search`, measured by
wrapping the functions the pipeline calls (the wrappers cost ~1 µs a call), plus
a cProfile listing of the same queries for the detail.

Stages: corpora (the store's corpus list, read per search), parse (user text ->
FTS query), fts (the FTS5 SQL), vector (matrix product and top k, then the id
lookup SQL), fetch (reading the candidate items), dedup (near-duplicate
collapse), fusion, hits (building Hit objects with boosts and labels), other
(the rest: plan, filters, sorting, the clock, labels).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from hybridkb import dedup, fusion, pipeline, textquery
from hybridkb.store import KnowledgeBase

from .measure import stats


class _Stages:
    """Accumulates seconds per stage. A stage called inside another (get_meta inside
    vector_search) counts toward the outer one; a sub-stage ("vector.matrix") is
    recorded inside its parent as well."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.depth = 0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        sub = "." in name

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth and not sub:
                return fn(*args, **kwargs)
            self.depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return timed


@contextmanager
def patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    had_own = attr in vars(obj)
    old = vars(obj).get(attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        if had_own:
            setattr(obj, attr, old)
        else:
            delattr(obj, attr)


def _split_vector(backend: Any, rec: _Stages) -> Callable[..., Any]:
    """Time the matrix search inside vector_search apart from its SQL."""
    original = backend.vector_search

    def vector_search(*args: Any, **kwargs: Any) -> Any:
        index = getattr(backend, "_index", None)
        if index is None:
            return original(*args, **kwargs)
        with patched(index, "search", rec.wrap("vector.matrix", index.search)):
            return original(*args, **kwargs)
    return vector_search


def stage_breakdown(kb: KnowledgeBase, queries: Sequence[str], *, mode: str = "hybrid",
                    limit: int = 10) -> dict[str, Any]:
    """Mean milliseconds per search spent in each stage, over `queries`."""
    rec = _Stages()
    backend = kb.backend
    totals: list[float] = []
    with ExitStack() as stack:
        # One retrieval after the other: a vector search on a worker thread would be timed
        # as the caller's wait ("other"), not as "vector".
        stack.enter_context(patched(type(backend), "retrieves_concurrently", False))
        for name, attr in (("corpora", "corpora"), ("fts", "text_search"), ("fetch", "items_by_key"),
                           ("meta", "get_meta")):
            stack.enter_context(patched(backend, attr, rec.wrap(name, getattr(backend, attr))))
        stack.enter_context(patched(backend, "vector_search",
                                     rec.wrap("vector", _split_vector(backend, rec))))
        stack.enter_context(patched(textquery, "parse", rec.wrap("parse", textquery.parse)))
        stack.enter_context(patched(dedup, "collapse", rec.wrap("dedup", dedup.collapse)))
        # the pipeline fuses through fuse_with_best (fuse alone is the public entry)
        stack.enter_context(patched(fusion, "fuse_with_best",
                                    rec.wrap("fusion", fusion.fuse_with_best)))
        stack.enter_context(patched(pipeline, "_hit", rec.wrap("hits", pipeline._hit)))
        for q in queries:
            start = time.perf_counter()
            kb.search(q, mode=mode, limit=limit)
            totals.append(time.perf_counter() - start)
    n = max(1, len(queries))
    per = {name: s / n * 1000.0 for name, s in rec.seconds.items()}
    if "vector.matrix" in per:
        per["vector.sql"] = per["vector"] - per["vector.matrix"]
    total_ms = sum(totals) / n * 1000.0
    accounted = sum(v for k, v in per.items() if "." not in k)
    per["other"] = total_ms - accounted
    order = ["corpora", "meta", "parse", "fts", "vector", "vector.matrix", "vector.sql", "fetch",
             "dedup", "fusion", "hits", "other"]
    return {
        "mode": mode, "queries": len(queries), "total": stats(totals),
        "mean_ms_by_stage": {k: round(per[k], 4) for k in order if k in per},
        "share_by_stage": {k: round(per[k] / total_ms, 4) for k in order
                           if k in per and "." not in k and total_ms > 0},
    }


def cprofile_top(kb: KnowledgeBase, queries: Sequence[str], *, mode: str = "hybrid",
                 top: int = 30) -> str:
    """A cProfile listing (sorted by own time) of `queries` searched in `mode`."""
    profiler = cProfile.Profile()
    profiler.enable()
    for q in queries:
        kb.search(q, mode=mode)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()
