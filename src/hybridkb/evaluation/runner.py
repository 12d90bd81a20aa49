"""The eval runner: index a BEIR dataset into a fresh store, run its queries in each
mode and fusion, and report nDCG@10, Recall@100, MRR@10 and query latency.

Every row but one runs with the score policy and near-duplicate collapse off, so
documents are ranked purely by retrieval. The `default` row is what a user gets
from `kb.search(query)` with no options (policy and dedup at their defaults).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import open as open_kb
from ..embedding import Embedder
from ..errors import InvalidInputError
from ..fusion import DEFAULT_FUSION, DEFAULT_WEIGHTS, FUSIONS, RRF_K
from ..model import MODES
from ..scoring import ScorePolicy
from ..store import KnowledgeBase
from . import metrics
from .beir import Dataset, Query, file_sha256, load
from .cache import EmbeddingCache, PrecomputedQueries, ProgressFactory, cached_embed, no_progress
from .neardup import with_near_duplicates
from .typos import with_query_typos

Pair = tuple[float, float]
METRIC_NAMES = tuple(metrics.METRICS)
LIMIT = 100  # hits per query, so Recall@100 is meaningful


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One row: a mode, and for hybrid its fusion, weights (fts, vector) and RRF k."""

    mode: str
    fusion: str | None = None
    weights: Pair | None = None
    rrf_k: float | None = None
    bm25_weights: Pair | None = None  # a backend option; None keeps the backend's default
    default: bool = False  # KnowledgeBase defaults exactly (score policy and dedup on)
    merge: str | None = None  # how several corpora merge; None keeps the search default


@dataclass(frozen=True, slots=True)
class EvalOptions:
    modes: Sequence[str] = MODES
    fusions: Sequence[str] = FUSIONS
    weights: Sequence[Pair] = (DEFAULT_WEIGHTS,)
    rrf_ks: Sequence[float] = (RRF_K,)
    bm25_weights: Sequence[Pair | None] = (None,)
    split: str = "test"
    max_queries: int | None = None
    ignore_identical_ids: bool = False
    scope_by: str | None = None
    db: str | None = None  # None: a fresh SQLite file in a temporary folder
    limit: int = LIMIT
    depth: int | None = None  # candidates per retriever; None: the search default for `limit`
    default_row: bool = True
    keep_runs: bool = False  # keep each row's ranked ids per query (for tests)
    near_duplicates: bool = False  # add near-copies of relevant documents (neardup.py)
    query_typos: bool = False  # misspell the queries (typos.py): a set where dense is stronger
    merges: Sequence[str | None] = (None,)  # several datasets: merges for every-corpus rows
    distractors: bool = True  # several datasets: add the small distractor corpora


@dataclass(slots=True)
class RowResult:
    spec: RunSpec
    scores: dict[str, float]
    qps: float
    p50_ms: float
    p95_ms: float
    run: dict[str, list[str]] | None = None
    bm25_used: Pair | None = None  # the column weights FTS ran with (the backend's, if unset)
    # The same ranking with each hit credited for the first still-uncredited relevant id it
    # stands for (its own or a collapsed copy's): differs from `scores` only where the
    # default's duplicate collapse folded judged documents into one hit.
    credited: dict[str, float] | None = None
    # The default row: what min_score would keep of each query's first hit (metrics).
    min_score: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "mode": s.mode, "fusion": s.fusion,
            "weights": list(s.weights) if s.weights is not None else None,
            "rrf_k": s.rrf_k, "bm25_weights": list(self.bm25_used) if self.bm25_used else None,
            "score_policy": "default" if s.default else "off",
            "dedup": "default" if s.default else "off", "merge": s.merge,
            **{name: round(value, 6) for name, value in self.scores.items()},
            "qps": round(self.qps, 2), "p50_ms": round(self.p50_ms, 3),
            "p95_ms": round(self.p95_ms, 3), "default": s.default,
            **({f"credited_{name}": round(value, 6) for name, value in self.credited.items()}
               if self.credited is not None else {}),
            **({"min_score": self.min_score} if self.min_score is not None else {}),
        }


@dataclass(slots=True)
class EvalReport:
    dataset: str
    split: str
    n_docs: int
    n_queries: int
    embedder: str | None
    index_seconds: float
    corpus_embed_seconds: float | None
    corpus_embeddings_cached: bool | None
    query_embeddings_cached: bool | None
    scope_by: str | None
    ignore_identical_ids: bool
    depth: int | None = None
    rows: list[RowResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset, "split": self.split, "docs": self.n_docs,
            "queries": self.n_queries, "embedder": self.embedder,
            "index_seconds": round(self.index_seconds, 3),
            "corpus_embed_seconds": None if self.corpus_embed_seconds is None
            else round(self.corpus_embed_seconds, 3),
            "corpus_embeddings_cached": self.corpus_embeddings_cached,
            "query_embeddings_cached": self.query_embeddings_cached,
            "scope_by": self.scope_by, "ignore_identical_ids": self.ignore_identical_ids,
            "depth": self.depth,
            "latency_note": "per search call, query vectors precomputed (embedding excluded)",
            "results": [row.to_dict() for row in self.rows],
        }


def plan_runs(options: EvalOptions) -> list[RunSpec]:
    """The rows to run, in report order."""
    unknown = [m for m in options.modes if m not in MODES]
    if unknown:
        raise InvalidInputError(f"unknown mode {unknown[0]!r}; use {', '.join(MODES)}")
    bad = [f for f in options.fusions if f not in FUSIONS]
    if bad:
        raise InvalidInputError(f"unknown fusion {bad[0]!r}; use {', '.join(FUSIONS)}")
    specs: list[RunSpec] = []
    if "fts" in options.modes:
        specs.extend(RunSpec("fts", bm25_weights=b) for b in options.bm25_weights)
    if "vector" in options.modes:
        specs.append(RunSpec("vector"))
    if "hybrid" in options.modes:
        for b in options.bm25_weights:
            for fusion in options.fusions:
                for w in options.weights:
                    for k in options.rrf_ks if fusion == "rrf" else (None,):
                        specs.append(RunSpec("hybrid", fusion, w, k, b))
        if options.default_row:
            specs.append(RunSpec("hybrid", DEFAULT_FUSION, DEFAULT_WEIGHTS, RRF_K, None, True))
    return list(dict.fromkeys(specs))


def prepare(dataset: Dataset | str | Path, o: EvalOptions) -> Dataset:
    """Load `dataset` (if a path) and apply the dataset options (near-duplicates, typos)."""
    data = dataset if isinstance(dataset, Dataset) else load(dataset, o.split)
    data = with_near_duplicates(data) if o.near_duplicates else data
    return with_query_typos(data) if o.query_typos else data


def check(specs: Sequence[RunSpec], embedder: Embedder | None, o: EvalOptions) -> None:
    if not specs:
        raise InvalidInputError("nothing to run: choose at least one mode")
    if any(s.mode != "fts" for s in specs) and embedder is None:
        raise InvalidInputError("vector and hybrid modes need an embedder; use --mode fts")
    if o.max_queries is not None and o.max_queries < 1:
        raise InvalidInputError("max queries must be at least 1")


@dataclass(frozen=True, slots=True)
class Embedded:
    """A dataset's document and query vectors (None without a model)."""

    docs: np.ndarray[Any, Any] | None = None
    queries: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    seconds: float | None = None
    cached: bool | None = None
    queries_cached: bool | None = None


def embed(model: Embedder | None, data: Dataset, queries: Sequence[Query],
          cache: EmbeddingCache | None, progress: ProgressFactory) -> Embedded:
    """Vectors of the corpus (generated documents apart, so the file's entry stays valid)
    and of `queries`, from the cache where possible."""
    if model is None:
        return Embedded()
    n_file = len(data.corpus) - data.generated
    parts = [(data.corpus[:n_file], "corpus", file_sha256(data.corpus_file))]
    if data.generated:
        parts.append((data.corpus[n_file:], "generated", file_sha256(data.corpus_file)))
    blocks, seconds, cached = [], 0.0, True
    for docs, kind, sha in parts:
        got = cached_embed(model, kind=kind, source_sha=sha, ids=[d.id for d in docs],
                           texts=[d.embedding_text for d in docs], cache=cache, progress=progress)
        blocks.append(got.vectors)
        seconds += got.seconds
        cached = cached and got.cached
    qv = cached_embed(model, kind="queries", source_sha=file_sha256(data.queries_file),
                      ids=[q.id for q in queries], texts=[q.text for q in queries],
                      cache=cache, progress=progress)
    return Embedded(np.vstack(blocks) if blocks else None,
                    {q.text: v for q, v in zip(queries, qv.vectors, strict=True)},
                    seconds, cached, qv.cached)


def evaluate(
    dataset: Dataset | str | Path, embedder: Embedder | None, options: EvalOptions | None = None,
    *, cache: EmbeddingCache | None = None, progress: ProgressFactory = no_progress,
) -> EvalReport:
    """Index `dataset` into a fresh store and run every planned row over its queries."""
    o = options or EvalOptions()
    data = prepare(dataset, o)
    specs = plan_runs(o)
    check(specs, embedder, o)
    needs_vectors = any(s.mode != "fts" for s in specs)
    queries = data.queries[: o.max_queries] if o.max_queries else list(data.queries)
    qrels = {q.id: data.qrels[q.id] for q in queries}
    scopes = [_scope(q, o.scope_by) for q in queries]

    vectors = embed(embedder if needs_vectors else None, data, queries, cache, progress)
    model = (PrecomputedQueries(embedder, vectors.queries)
             if needs_vectors and embedder is not None else None)

    report = EvalReport(
        dataset=data.name, split=data.split, n_docs=len(data.corpus), n_queries=len(queries),
        embedder=model.model_id if model else None, index_seconds=0.0,
        corpus_embed_seconds=vectors.seconds, corpus_embeddings_cached=vectors.cached,
        query_embeddings_cached=vectors.queries_cached,
        scope_by=o.scope_by, ignore_identical_ids=o.ignore_identical_ids, depth=o.depth)
    corpus = f"beir-{data.name}"[:128]
    with _target(o.db) as target:
        with _open(target, model, None) as kb:
            report.index_seconds = _index(kb, data, corpus, vectors.docs, progress)
        results: dict[RunSpec, RowResult] = {}
        with progress(len(specs), f"searching ({len(queries)} queries a row)") as bar:
            for bm25 in dict.fromkeys(s.bm25_weights for s in specs):
                with _open(target, model, bm25) as kb:
                    for spec in (s for s in specs if s.bm25_weights == bm25):
                        results[spec] = _run_row(kb, spec, queries, qrels, scopes, [corpus], o)
                        bar.update(1)
    report.rows = [results[s] for s in specs]
    return report


def _scope(query: Query, key: str | None) -> dict[str, Any] | None:
    if key is None:
        return None
    if key not in query.metadata:
        raise InvalidInputError(f"query {query.id!r} has no metadata.{key} to scope by")
    value = query.metadata[key]
    if isinstance(value, list | tuple):
        return {"metadata": {key: list(value)}}
    return {"metadata": {key: value}}


@contextmanager
def _target(db: str | None) -> Iterator[str]:
    if db is not None:
        yield db
        return
    with tempfile.TemporaryDirectory(prefix="hybridkb-eval-") as folder:
        yield str(Path(folder) / "eval.db")


@contextmanager
def _open(target: str, model: Embedder | None, bm25: Pair | None) -> Iterator[KnowledgeBase]:
    options: dict[str, Any] = {} if bm25 is None else {"bm25_weights": bm25}
    try:
        kb = open_kb(target, embedder=model, **options)
    except TypeError as exc:
        raise InvalidInputError(f"this backend does not take {', '.join(options)}: {exc}") from exc
    try:
        yield kb
    finally:
        kb.close()


def _index(kb: KnowledgeBase, data: Dataset, corpus: str, vectors: np.ndarray[Any, Any] | None,
           progress: ProgressFactory, prefix: str = "") -> float:
    if kb.count(corpus):
        raise InvalidInputError(
            f"the store already holds corpus {corpus!r}; evaluate into a fresh store")
    items: list[dict[str, Any]] = []
    for i, doc in enumerate(data.corpus):
        item: dict[str, Any] = {"id": prefix + doc.id, "corpus": corpus, "title": doc.title,
                                "text": doc.text, "metadata": doc.metadata}
        if vectors is not None:
            item["vector"] = vectors[i]
        items.append(item)
    start = time.perf_counter()
    with progress(len(items), "indexing") as bar:
        kb.add_many(items, batch_size=500, progress=bar.update)
    return time.perf_counter() - start


def _run_row(
    kb: KnowledgeBase, spec: RunSpec, queries: Sequence[Query], qrels: metrics.Qrels,
    scopes: Sequence[dict[str, Any] | None], corpora: Sequence[str] | None, o: EvalOptions,
    prefix: str = "",
) -> RowResult:
    """Run every query with `spec` over `corpora` (None: every corpus); hit ids lose
    `prefix` (items of other datasets keep theirs, so they never match a judgment)."""
    limit = o.limit + (1 if o.ignore_identical_ids else 0)
    merge: dict[str, Any] = {} if spec.merge is None else {"merge": spec.merge}

    first: list[tuple[float, bool]] = []  # each query's first hit: score, relevant

    def search(query: Query, scope: dict[str, Any] | None) -> tuple[list[str], list[str]]:
        """(the hits' ids, the ids credited: a collapsed hit as a relevant id it stands for)."""
        if spec.default:
            result = kb.search(query.text, limit=limit, corpora=corpora, filters=scope, **merge)
        else:
            result = kb.search(
                query.text, mode=spec.mode, limit=limit, corpora=corpora, filters=scope,
                fusion=spec.fusion, weights=spec.weights, rrf_k=spec.rrf_k or RRF_K,
                depth=o.depth, dedup_threshold=None, score_policy=ScorePolicy.off(), **merge)
        hits = [[h.id, *(a["id"] for a in h.alternate_sources)] for h in result.hits]
        if prefix:
            hits = [[d.removeprefix(prefix) for d in ids] for ids in hits]
        if o.ignore_identical_ids:
            hits = [ids for ids in hits if ids[0] != query.id]
        hits = hits[: o.limit]
        got = credit(hits, qrels.get(query.id, {}))
        if hits:
            shown = next(h for h in result.hits if h.id.removeprefix(prefix) == hits[0][0])
            first.append((shown.score, qrels.get(query.id, {}).get(got[0], 0) > 0))
        return [ids[0] for ids in hits], got

    if queries:
        search(queries[0], scopes[0])  # warm-up: caches (vector matrix, statements) fill here
        first.clear()
    run: dict[str, list[str]] = {}
    credited: dict[str, list[str]] = {}
    latencies: list[float] = []
    for query, scope in zip(queries, scopes, strict=True):
        start = time.perf_counter()
        run[query.id], credited[query.id] = search(query, scope)
        latencies.append(time.perf_counter() - start)
    total = sum(latencies)
    ms = np.asarray(latencies or [0.0]) * 1000.0
    return RowResult(
        spec=spec, scores=metrics.evaluate(run, qrels),
        qps=len(latencies) / total if total > 0 else 0.0,
        p50_ms=float(np.percentile(ms, 50)), p95_ms=float(np.percentile(ms, 95)),
        run=run if o.keep_runs else None,
        bm25_used=None if spec.mode == "vector"
        else spec.bm25_weights or kb.bm25_weights,
        credited=metrics.evaluate(credited, qrels),
        min_score=metrics.min_score_curve(first) if spec.default else None)


def credit(hits: Sequence[Sequence[str]], judged: metrics.Judgments) -> list[str]:
    """Each hit (its id, then the ids of the copies collapsed into it) as the first of its
    ids that is relevant and not credited yet; a hit with none keeps its own id (once: a
    repeat becomes a placeholder that matches no judgment, so ranks stay put)."""
    out: list[str] = []
    used: set[str] = set()
    for ids in hits:
        pick = next((d for d in ids if judged.get(d, 0) > 0 and d not in used), None)
        if pick is None:
            pick = ids[0] if ids[0] not in used else f"{ids[0]}\x00{len(out)}"
        used.add(pick)
        out.append(pick)
    return out


def _pair(p: Pair | None) -> str:
    return "-" if p is None else ",".join(f"{x:g}" for x in p)


def format_table(report: EvalReport) -> str:
    """A plain-text table of the report, one row per run; the default row is starred."""
    head = (f"{report.dataset} ({report.split}): {report.n_queries} queries, {report.n_docs} docs; "
            f"index {report.index_seconds:.1f} s")
    if report.corpus_embeddings_cached is not None:
        head += ("; corpus embeddings cached" if report.corpus_embeddings_cached
                 else f"; corpus embedded in {report.corpus_embed_seconds or 0.0:.1f} s")
    if report.scope_by:
        head += f"; scoped by metadata.{report.scope_by}"
    if report.depth:
        head += f"; depth {report.depth} per retriever"
    cols = ("mode", "fusion", "weights", "k", "bm25", "nDCG@10", "R@100", "MRR@10", "qps",
            "p50 ms", "p95 ms")
    rows: list[tuple[str, ...]] = []
    for r in report.rows:
        s = r.spec
        rows.append((
            s.mode + ("*" if s.default else ""), s.fusion or "-" if s.mode == "hybrid" else "-",
            _pair(s.weights) if s.mode == "hybrid" else "-",
            f"{s.rrf_k:g}" if s.rrf_k is not None and s.fusion == "rrf" else "-",
            _pair(r.bm25_used),
            f"{r.scores['ndcg@10']:.4f}", f"{r.scores['recall@100']:.4f}",
            f"{r.scores['mrr@10']:.4f}", f"{r.qps:.1f}", f"{r.p50_ms:.1f}", f"{r.p95_ms:.1f}"))
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(w) if i < 5 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cols, widths, strict=True)))]
    for row in rows:
        lines.append("  ".join(v.ljust(w) if i < 5 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    if any(r.spec.default for r in report.rows):
        lines.append("* the default: kb.search(query) with no options "
                     "(score policy and near-duplicate collapse on); other rows have both off")
        lines.extend(credited_line(r) for r in report.rows if r.spec.default)
        lines.extend(min_score_line(r) for r in report.rows if r.spec.default and r.min_score)
    return "\n".join(lines)


def min_score_line(row: RowResult) -> str:
    """The default row's first hits under each min_score: relevant kept / irrelevant dropped."""
    got = row.min_score or {}
    cells = " ".join(f"{t} {c['kept'] if c['kept'] is not None else '-'}/"
                     f"{c['dropped'] if c['dropped'] is not None else '-'}"
                     for t, c in got.get("curve", {}).items())
    return (f"  min_score on the first hits ({got.get('relevant')} relevant, "
            f"{got.get('irrelevant')} not), threshold kept/dropped: {cells}")


def credited_line(row: RowResult) -> str:
    """The default row's second reading: a collapsed hit credited for the ids it stands for."""
    got = row.credited or row.scores
    return (f"  default row, a collapsed hit credited for the first uncredited relevant id it "
            f"stands for: nDCG@10 {got['ndcg@10']:.4f}, R@100 {got['recall@100']:.4f}, "
            f"MRR@10 {got['mrr@10']:.4f} (by the hit's own id: {row.scores['ndcg@10']:.4f})")


def split_values(values: Sequence[str]) -> list[str]:
    """Repeated options and comma lists alike: ("fts,vector", "hybrid") -> 3 values."""
    return [v.strip() for raw in values for v in raw.split(",") if v.strip()]


def parse_pairs(values: Sequence[str], what: str) -> list[Pair]:
    """Weight pairs "1,0.5", repeated or separated by ';' or spaces: ("1,1; 1,0.5",)."""
    out: list[Pair] = []
    for raw in values:
        for chunk in raw.replace(";", " ").split():
            parts = chunk.split(",")
            try:
                a, b = (float(p) for p in parts)
            except ValueError as exc:
                raise InvalidInputError(
                    f"{what} takes two numbers like 1,0.5 (got {chunk!r})") from exc
            out.append((a, b))
    return out
