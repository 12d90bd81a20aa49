"""Multi-corpus evaluation: several BEIR sets as corpora of one store, plus distractors.

A store usually holds more than one corpus, and `kb.search(q)` searches all of them.
This loads each dataset into its own corpus (item ids prefixed by the dataset name, so
they never collide), adds two small distractor corpora (a few unrelated office notes,
one of them a decision, which the score policy boosts; and items with next to no text),
then runs each dataset's judged queries twice per row: limited to its own corpus, and
over every corpus. A hit from another corpus is never relevant, so the difference is
what searching everything costs. Beside it, the every-corpus ranking with the other
corpora's hits taken out ("condensed", as Sakai's condensed lists for incomplete
judgments): equal to the own-corpus figure when merging keeps the order of the set's own
documents, so what remains of the difference is other corpora's documents taking places,
which are unjudged for these queries (counted wrong even where they answer).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import calibration, textquery
from ..embedding import Embedder
from ..errors import InvalidInputError
from . import metrics, runner
from .beir import Dataset, Query
from .cache import EmbeddingCache, PrecomputedQueries, ProgressFactory, no_progress
from .runner import EvalOptions, RowResult, RunSpec

NOTES_CORPUS = "office-notes"
EMPTY_CORPUS = "scratch"
NOTES: tuple[dict[str, Any], ...] = (
    {"id": "note-1", "title": "Team offsite", "kind": "decision",
     "text": "We decided to hold the team offsite in Lisbon in the second week of May."},
    {"id": "note-2", "title": "Printer", "kind": "memory",
     "text": "The printer on the third floor needs a new toner cartridge; facilities will order it."},
    {"id": "note-3", "title": "Expenses", "kind": "lesson",
     "text": "Submit travel expenses within thirty days, with receipts, or finance rejects them."},
)
NEAR_EMPTY = ("ok", "todo", "see above", "-", "tbd", "done", "n/a", "?", "fixed", "wip")


@dataclass(slots=True)
class MultiRow:
    """One spec over one dataset's queries: its own corpus, and every corpus."""

    spec: RunSpec
    dataset: str
    own: RowResult
    every: RowResult
    condensed: dict[str, float]  # every-corpus ranking without other corpora's hits
    # Queries where a distractor item ranks above a hit that contains a query word, and
    # queries whose top 10 a distractor enters (None without distractors).
    distractor_above: int | None = None
    distractor_top10: int | None = None
    distractor_above_any: int | None = None  # the same, counting a note holding a query word too

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.every.to_dict().items() if k not in runner.METRIC_NAMES}
        out["dataset"] = self.dataset
        for name in runner.METRIC_NAMES:
            out[f"own_{name}"] = round(self.own.scores[name], 6)
            out[f"every_{name}"] = round(self.every.scores[name], 6)
            out[f"condensed_{name}"] = round(self.condensed[name], 6)
        out["own_p50_ms"] = round(self.own.p50_ms, 3)
        out["distractor_above_match"] = self.distractor_above
        out["any_distractor_above_match"] = self.distractor_above_any
        out["distractor_in_top10"] = self.distractor_top10
        return out


@dataclass(slots=True)
class MultiReport:
    datasets: dict[str, tuple[int, int]]  # name -> (documents, judged queries)
    corpora: dict[str, int]
    embedder: str | None
    index_seconds: float
    scope_by: str | None
    near_duplicates: bool
    rows: list[MultiRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "datasets": {n: {"docs": d, "queries": q} for n, (d, q) in self.datasets.items()},
            "corpora": self.corpora, "embedder": self.embedder,
            "index_seconds": round(self.index_seconds, 3), "scope_by": self.scope_by,
            "near_duplicates": self.near_duplicates,
            "latency_note": "per search call, query vectors precomputed (embedding excluded)",
            "results": [r.to_dict() for r in self.rows],
        }


def evaluate_multi(
    datasets: Sequence[Dataset | str | Path], embedder: Embedder | None,
    options: EvalOptions | None = None, *, cache: EmbeddingCache | None = None,
    progress: ProgressFactory = no_progress,
) -> MultiReport:
    """Index every dataset (and the distractors) into one fresh store; run each planned
    row over each dataset's queries, own corpus and every corpus."""
    o = options or EvalOptions()
    loaded = [runner.prepare(d, o) for d in datasets]
    names = [d.name for d in loaded]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"datasets must have distinct folder names, got {names}")
    base = runner.plan_runs(o)
    runner.check(base, embedder, o)
    needs_vectors = any(s.mode != "fts" for s in base)
    model = embedder if needs_vectors else None

    per: list[tuple[Dataset, list[Query], runner.Embedded]] = []
    query_vectors: dict[str, Any] = {}
    for data in loaded:
        queries = data.queries[: o.max_queries] if o.max_queries else list(data.queries)
        vectors = runner.embed(model, data, queries, cache, progress)
        query_vectors.update(vectors.queries)
        per.append((data, queries, vectors))
    searcher = PrecomputedQueries(model, query_vectors) if model is not None else None

    report = MultiReport(
        datasets={d.name: (len(d.corpus), len(q)) for d, q, _ in per}, corpora={},
        embedder=searcher.model_id if searcher else None, index_seconds=0.0,
        scope_by=o.scope_by, near_duplicates=o.near_duplicates)
    with runner._target(o.db) as target:
        with runner._open(target, searcher, None) as kb:
            start = time.perf_counter()
            for data, _, vectors in per:
                runner._index(kb, data, _corpus(data), vectors.docs, progress, _prefix(data))
            if o.distractors:
                kb.add_many([{**n, "corpus": NOTES_CORPUS} for n in NOTES])
                kb.add_many([{"id": f"scratch-{i}", "corpus": EMPTY_CORPUS, "text": t}
                             for i, t in enumerate(NEAR_EMPTY)])
            report.index_seconds = time.perf_counter() - start
            report.corpora = kb.corpora()
        words = _Words(per, o.distractors)
        for bm25 in dict.fromkeys(s.bm25_weights for s in base):
            with runner._open(target, searcher, bm25) as kb:
                for spec in (s for s in base if s.bm25_weights == bm25):
                    for data, queries, _ in per:
                        report.rows.extend(_rows(kb, spec, data, queries, o, words))
    return report


class _Words:
    """The word sets of every stored item by the id a run names it with, and which items
    are distractors: enough to ask whether a distractor outranks a matching document."""

    def __init__(self, per: Sequence[tuple[Dataset, list[Query], Any]], distractors: bool) -> None:
        # The three office notes: a tiny unrelated corpus (the near-empty items are not
        # counted: they hold no words a query could share).
        self.distractors = {n["id"] for n in NOTES} if distractors else set()
        self._texts: dict[str, str] = {n["id"]: f"{n['title']} {n['text']}" for n in NOTES}
        for data, _, _ in per:
            for doc in data.corpus:
                self._texts[_prefix(data) + doc.id] = f"{doc.title or ''} {doc.text}"

    def matches(self, stored_id: str, words: set[str]) -> bool:
        text = self._texts.get(stored_id)
        return text is not None and not words.isdisjoint(calibration.tokens(text))

    def counts(self, run: dict[str, list[str]], queries: Sequence[Query], own: set[str],
               prefix: str) -> tuple[int, int, int]:
        """(queries where a distractor holding none of the query's words ranks above a hit
        holding one, queries with a distractor in their top 10, queries where any distractor
        ranks above a hit holding a query word). A note that holds a query word is a word
        match like the documents it is weighed against, not a distractor beating one; the
        third count shows it anyway. `run` names the set's own documents without `prefix`."""
        above = top10 = above_any = 0
        for query in queries:
            ranked = run.get(query.id, [])
            first = next((i for i, d in enumerate(ranked) if d in self.distractors), None)
            if first is None:
                continue
            top10 += first < 10
            words = set(textquery.parse(query.text).words)
            above_any += self._matched_below(ranked, first, words, own, prefix)
            unrelated = next((i for i, d in enumerate(ranked)
                              if d in self.distractors and not self.matches(d, words)), None)
            above += unrelated is not None and self._matched_below(ranked, unrelated, words, own,
                                                                   prefix)
        return above, top10, above_any

    def _matched_below(self, ranked: list[str], start: int, words: set[str], own: set[str],
                       prefix: str) -> bool:
        """A document (not a distractor) ranked under position `start` holds a query word."""
        return any(self.matches(prefix + d if d in own else d, words)
                   for d in ranked[start + 1:] if d not in self.distractors)


def _corpus(data: Dataset) -> str:
    return f"beir-{data.name}"[:128]


def _prefix(data: Dataset) -> str:
    return f"{data.name}:"


def _scope(query: Query, key: str | None) -> dict[str, Any] | None:
    """Several datasets: only the queries that carry metadata.KEY are scoped by it."""
    if key is None or key not in query.metadata:
        return None
    return runner._scope(query, key)


def _rows(kb: Any, spec: RunSpec, data: Dataset, queries: list[Query],
          o: EvalOptions, words: _Words) -> list[MultiRow]:
    qrels = {q.id: data.qrels[q.id] for q in queries}
    scopes = [_scope(q, o.scope_by) for q in queries]
    own = runner._run_row(kb, spec, queries, qrels, scopes, [_corpus(data)], o, _prefix(data))
    ids = {d.id for d in data.corpus}
    out = []
    for merge in o.merges:
        s = replace(spec, merge=merge)
        every = runner._run_row(kb, s, queries, qrels, scopes, None,
                                replace(o, keep_runs=True), _prefix(data))
        assert every.run is not None
        condensed = metrics.evaluate(
            {q: [d for d in ranked if d in ids] for q, ranked in every.run.items()}, qrels)
        above, top10, above_any = (words.counts(every.run, queries, ids, _prefix(data)) if o.distractors
                                   else (None, None, None))
        if not o.keep_runs:
            every.run = None
        out.append(MultiRow(s, data.name, own, every, condensed, above, top10, above_any))
    return out


def format_multi(report: MultiReport) -> str:
    """One line per (row, dataset): own-corpus and every-corpus figures and their difference."""
    sets = ", ".join(f"{n} ({d} docs, {q} queries)" for n, (d, q) in report.datasets.items())
    head = [f"one store: {sets}; corpora {report.corpora}; index {report.index_seconds:.1f} s"]
    if report.near_duplicates:
        head.append("near-duplicate decoys and siblings added to every dataset")
    if report.scope_by:
        head.append(f"queries carrying metadata.{report.scope_by} scoped by it")
    cols = ("dataset", "mode", "fusion", "weights", "merge", "own nDCG", "every nDCG", "diff",
            "condensed", "own R@100", "every R@100", "diff", "every p50 ms", "distr. above",
            "(any)", "distr. top10")
    rows: list[tuple[str, ...]] = []
    for r in report.rows:
        s, own, every = r.spec, r.own.scores, r.every.scores
        rows.append((
            r.dataset, s.mode + ("*" if s.default else ""),
            (s.fusion or "-") if s.mode == "hybrid" else "-",
            runner._pair(s.weights) if s.mode == "hybrid" else "-", s.merge or "default",
            f"{own['ndcg@10']:.4f}", f"{every['ndcg@10']:.4f}",
            f"{every['ndcg@10'] - own['ndcg@10']:+.4f}", f"{r.condensed['ndcg@10']:.4f}",
            f"{own['recall@100']:.4f}", f"{every['recall@100']:.4f}",
            f"{every['recall@100'] - own['recall@100']:+.4f}", f"{r.every.p50_ms:.1f}",
            "-" if r.distractor_above is None else str(r.distractor_above),
            "-" if r.distractor_above_any is None else str(r.distractor_above_any),
            "-" if r.distractor_top10 is None else str(r.distractor_top10)))
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    lines = [*head, "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("condensed: nDCG@10 of the every-corpus ranking with other corpora's hits "
                 "taken out (unjudged for these queries)")
    lines.append("distr. above: queries where an office note (the distractor corpus) holding no "
                 "query word ranks above a hit holding one; (any): any note, one holding a query "
                 "word too; distr. top10: queries whose top 10 a note enters")
    if any(r.spec.default for r in report.rows):
        lines.append("* the default: kb.search(query) with no options "
                     "(score policy and near-duplicate collapse on); other rows have both off")
    return "\n".join(lines)
