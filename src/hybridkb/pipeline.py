"""The search pipeline, written once for every backend.

plan -> retrieve once per retriever over every corpus searched (filters inside each
query) -> collapse duplicates in each list -> fuse -> collapse what is left across
lists and corpora -> score in [0, 1] and policy -> page. With merge="rrf" each corpus is
retrieved and fused apart and the corpora are interleaved by RRF. Backends know SQL;
this module knows fusion.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from . import calibration, dedup, querysyntax, textquery
from . import fusion as fusion_lib

__all__ = ["DEFAULT_FUSION", "DEFAULT_MERGE", "DEFAULT_WEIGHTS", "MERGES", "SearchPlan", "dedup",
           "fusion_lib", "run"]
from .calibration import Background, Evidence
from .errors import InvalidInputError
from .labels import source_label
from .model import MODES, Filters, Hit, RetrieverHit, SearchResult, StoredItem
from .scoring import ScorePolicy, apply, boosted_by, relevance
from .storage import notices
from .storage.contract import Backend, Key, ScoredKeys, SearchArea, Vector
from .storage.workers import Workers

# Each retriever returns max(MIN_DEPTH, offset + limit) candidates. A depth that does
# not grow with `limit` keeps score-aware fusions (whose normalization depends on the
# list) giving the same top 10 whether a caller asks for 10 hits or 100. Deep lists
# give DBSF's mean and deviation a stable footing (see docs/quality.md).
MIN_DEPTH = 300
# Only heads are read back from the store: near-duplicates are collapsed in the first
# max(DEDUP_HEAD, 2 * (offset + limit)) entries of each list, and the score policy
# reorders the first max(POOL, 3 * (offset + limit)) fused candidates.
DEDUP_HEAD = 20
POOL = 50
# merge="rrf" retrieves each corpus apart up to this many corpora; past it, once over all
# of them (a corpus with nothing in the store-wide first `depth` then has no say).
RRF_APART_MAX = 8


def _heads(plan: SearchPlan) -> tuple[int, int]:
    wanted = plan.offset + plan.limit
    return max(DEDUP_HEAD, 2 * wanted), max(POOL, 3 * wanted)

# The search defaults live in `fusion` (pure); re-exported here for the plan.
DEFAULT_FUSION = fusion_lib.DEFAULT_FUSION
DEFAULT_WEIGHTS = fusion_lib.DEFAULT_WEIGHTS
DEFAULT_MERGE, MERGES = fusion_lib.DEFAULT_MERGE, fusion_lib.MERGES


@dataclass(frozen=True, slots=True)
class SearchPlan:
    query: str
    mode: str = "hybrid"
    limit: int = 10
    offset: int = 0
    filters: Filters = field(default_factory=Filters)
    fusion: str = DEFAULT_FUSION
    weights: tuple[float, float] = DEFAULT_WEIGHTS
    rrf_k: float = fusion_lib.RRF_K
    depth: int | None = None
    dedup_threshold: float | None = dedup.DEFAULT_THRESHOLD
    dedup_cosine: float | None = None
    policy: ScorePolicy = field(default_factory=ScorePolicy)
    min_score: float | None = None
    max_terms: int = textquery.MAX_TERMS
    merge: str = DEFAULT_MERGE
    syntax: bool = True  # read `"phrase" +word -word field:value prefix*` (querysyntax.py)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise InvalidInputError(f"unknown mode {self.mode!r}; use hybrid, fts or vector")
        if self.fusion not in fusion_lib.FUSIONS:
            raise InvalidInputError(
                f"unknown fusion {self.fusion!r}; use one of {', '.join(fusion_lib.FUSIONS)}")
        if not isinstance(self.limit, int) or self.limit < 1 or self.limit > 10_000:
            raise InvalidInputError(f"limit must be an integer from 1 to 10000, got {self.limit!r}")
        if not isinstance(self.offset, int) or self.offset < 0:
            raise InvalidInputError(f"offset must be an integer >= 0, got {self.offset!r}")
        if not self.rrf_k > 0:
            raise InvalidInputError(f"RRF k must be > 0, got {self.rrf_k!r}")
        if len(self.weights) != 2 or any(not (math.isfinite(w) and w >= 0) for w in self.weights):
            raise InvalidInputError(f"weights must be two finite numbers >= 0, got {self.weights!r}")
        if self.depth is not None and (self.depth < 1 or self.depth > 4096):
            raise InvalidInputError(f"depth must be from 1 to 4096, got {self.depth!r}")
        if self.dedup_threshold is not None and not 0.0 < self.dedup_threshold <= 1.0:
            raise InvalidInputError(f"dedup threshold must be in (0, 1], got {self.dedup_threshold}")
        if self.dedup_cosine is not None and not -1.0 <= self.dedup_cosine <= 1.0:
            raise InvalidInputError(f"dedup_cosine must be in [-1, 1], got {self.dedup_cosine}")
        if self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise InvalidInputError(f"min_score is a score in [0, 1], got {self.min_score}")
        if self.merge not in MERGES:
            raise InvalidInputError(f"unknown merge {self.merge!r}; use {' or '.join(MERGES)}")

    @property
    def candidate_depth(self) -> int:
        if self.depth is not None:
            return self.depth
        return min(4096, max(MIN_DEPTH, self.offset + self.limit))


@dataclass(slots=True)
class _Candidate:
    fused: float  # the fused score, or under merge="rrf" the cross-corpus RRF score
    owner: _Group  # the group it was fused in (its retrievers' ranks are read from there)
    alternates: list[Key] = field(default_factory=list)
    relevance: float = 0.0  # calibrated, or fused / best possible in its list group; in [0, 1]
    merged: bool = False  # ranked by the cross-corpus RRF score (merge="rrf")
    evidence: Evidence | None = None
    calibrated: float = 0.0  # the calibrated relevance, whatever the fusion


@dataclass(slots=True)
class _Group:
    """One group's lists after collapse and fusion. Candidates are made from it only for
    the pool a search reads further (a few dozen of several hundred fused ids)."""

    order: list[Key]  # fused, best first: the pool's worth (the rest is never read)
    fused: dict[Key, float]  # of the keys in `order`
    best: float  # the best fused score possible in this group
    lists: dict[str, ScoredKeys]  # each retriever's list after its head's collapse
    alternates: dict[Key, list[Key]]  # survivor -> the copies its lists' collapse absorbed
    judge: _Judge
    _ranks: dict[str, dict[Key, int]] | None = None  # list -> key -> its place (from 0)

    def candidate(self, doc: Key, item: StoredItem) -> _Candidate:
        score = self.fused[doc]
        ev, calibrated = self.judge.of(doc, item)
        return _Candidate(score, self, list(self.alternates.get(doc, ())), relevance(score, self.best),
                          evidence=ev, calibrated=calibrated)

    def retrievers(self, doc: Key) -> dict[str, RetrieverHit]:
        """Where each list placed `doc` (asked for the page's hits only)."""
        if self._ranks is None:  # an id listed twice keeps its last place, as a dict does
            self._ranks = {name: dict(zip([d for d, _ in scored], range(len(scored)), strict=True))
                           for name, scored in self.lists.items()}
        return {name: RetrieverHit(rank=at + 1, score=self.lists[name][at][1])
                for name, ranks in self._ranks.items() if (at := ranks.get(doc)) is not None}


class _Judge:
    """Each candidate's evidence and calibrated relevance, from one group's lists."""

    def __init__(self, lists: dict[str, ScoredKeys], cover: _Covered, background: Background | None) -> None:
        self.cover, self.background = cover, background
        self.kind = calibration.kind_of("fts" in lists or "substring" in lists, "vector" in lists)
        self.bounds = {name: calibration.dbsf_bounds(s for _, s in scored)
                       for name, scored in lists.items() if scored}
        # an id listed twice keeps its first (best) score: later pairs overwrite earlier ones
        self.scores = {name: dict(reversed(scored)) for name, scored in lists.items()}
        vec = lists.get("vector") or []
        self.floor = vec[-1][1] if vec else None  # a cosine below the list's last, at most this
        self._known: dict[Key, tuple[Evidence, float]] = {}
        # Whether the relevance reads the query terms' coverage of the text (not a vector-only
        # search's model): else coverage is worked out for the page's hits only (`shown`), not
        # for each of the ~50 candidates ranked (tokenizing their texts was most of the work).
        weights = calibration.COEFFICIENTS[self.kind]
        self.ranks_by_coverage = bool(weights[1] or weights[5])

    def of(self, doc: Key, item: StoredItem) -> tuple[Evidence, float]:
        known = self._known.get(doc)
        if known is None:
            known = self._known[doc] = self._judge(doc, item)
        return known

    def shown(self, doc: Key, item: StoredItem, ev: Evidence) -> Evidence:
        """`ev` as a hit shows it: with its coverage where ranking did without it."""
        if self.ranks_by_coverage:
            return ev
        return dataclasses.replace(ev, coverage=self.cover.of(doc, item))

    def _judge(self, doc: Key, item: StoredItem) -> tuple[Evidence, float]:
        text_name = "fts" if "fts" in self.scores else "substring"
        bm25 = self.scores.get(text_name, {}).get(doc)
        cosine = self.scores.get("vector", {}).get(doc)
        ev = Evidence(
            coverage=self.cover.of(doc, item) if self.ranks_by_coverage else 0.0,
            bm25=0.0 if bm25 is None else calibration.scaled(bm25, self.bounds[text_name]),
            vector=0.0 if cosine is None else calibration.scaled(cosine, self.bounds["vector"]),
            cosine_z=calibration.cosine_z(cosine if cosine is not None else self.floor or 0.0,
                                          self.background) if "vector" in self.scores else 0.0)
        return ev, calibration.relevance(ev, self.kind)


class _Covered:
    """The query terms' coverage of each item's title and text, worked out once per search
    (every group's judge asks the same; a hybrid search works out the text list's while
    its vector search runs)."""

    def __init__(self, terms: Sequence[Sequence[str]]) -> None:
        self._cover = calibration.Coverage(terms)
        self._known: dict[Key, float] = {}

    def of(self, doc: Key, item: StoredItem) -> float:
        known = self._known.get(doc)
        if known is None:
            known = self._known[doc] = self._cover(_text(item))
        return known


def _text(item: StoredItem) -> str:
    return f"{item.title} {item.text}" if item.title else item.text


QueryEmbedder = Callable[[str], Vector]


class Reranker(Protocol):
    """A rerank stage (a cross-encoder, embedding/rerank.py): it reorders a search's first
    `depth` hits by `score`, one relevance in [0, 1] per text for the query."""

    depth: int

    def score(self, query: str, texts: Sequence[str]) -> list[float]: ...


Placer = Callable[[Filters, Sequence[str]], tuple[Filters, list[str]]]


def run(
    plan: SearchPlan, backend: Backend, *, corpora: Sequence[str], now: float,
    embed_query: QueryEmbedder | None, labels: dict[str, str] | None = None,
    notes: Sequence[str] = (), rerank: Reranker | None = None, place: Placer | None = None,
    background: Background | None = None,
) -> SearchResult:
    """Execute a validated plan over `corpora` (already resolved by the caller). What the
    store notes meanwhile (an index that could not answer as it should) joins `notes`.
    `place(filters, corpora)` reads the filters (the query's own `path:` and such joined in)
    against the store before the retrievers run (store_filters.py). `background` is the
    store's noise cosine (noise.py), which the calibrated relevance judges against."""
    with notices.collecting() as noted:
        result = _run(plan, backend, corpora=corpora, now=now, embed_query=embed_query,
                      labels=labels, notes=notes, rerank=rerank, place=place,
                      background=background)
    result.notes.extend(n for n in noted if n not in result.notes)
    return result


def _run(
    plan: SearchPlan, backend: Backend, *, corpora: Sequence[str], now: float,
    embed_query: QueryEmbedder | None, labels: dict[str, str] | None, notes: Sequence[str],
    rerank: Reranker | None, place: Placer | None, background: Background | None,
) -> SearchResult:
    labels = labels or {}
    result_notes = list(notes)
    parsed = (querysyntax.parse(plan.query, max_terms=plan.max_terms) if plan.syntax else
              querysyntax.ParsedQuery(textquery.parse(plan.query, max_terms=plan.max_terms), plan.query))
    text_query, match = parsed.text, parsed.match
    result_notes.extend(parsed.notes)
    if text_query.truncated:
        result_notes.append(f"query cut to its {plan.max_terms} most selective terms")
    filters, corpora, narrowed = parsed.narrow(plan.filters, corpora)
    result_notes.extend(narrowed)
    if place is not None:
        filters, corpora = place(filters, corpora)
    use_fts = plan.mode in ("hybrid", "fts")
    use_vec = plan.mode in ("hybrid", "vector") and embed_query is not None and parsed.embed_text.strip()
    qvec = embed_query(parsed.embed_text) if use_vec and embed_query is not None else None

    depth = plan.candidate_depth
    head, pool = _heads(plan)
    calibrated = plan.fusion == "calibrated"  # every list's first `pool` are candidates: read them
    covered = _Covered(text_query.terms)
    # Merge by relevance: every corpus searched at once, one list per retriever. Merge by
    # RRF: one group per corpus, fused apart and interleaved by rank; past RRF_APART_MAX
    # corpora the lists come from one retrieval over all of them, split by corpus.
    groups = [tuple(corpora)] if plan.merge == "relevance" and corpora else [(c,) for c in corpora]
    split = len(groups) > RRF_APART_MAX
    searched = [tuple(corpora)] if split else groups
    items: dict[Key, StoredItem] = {}  # by the key the retrievers named them with

    def retrieve(one: Callable[[SearchArea], dict[str, ScoredKeys]]) -> None:
        nonlocal groups
        got = {g: one(SearchArea(corpora=g, filters=filters, now=now, match=match))
               for g in searched}
        if split:
            _fetch(backend, items, {d for per in got.values() for sc in per.values() for d, _ in sc})
            got = _by_corpus(got[searched[0]], items)
            groups = [(c,) for c in corpora if (c,) in got]
        lists.update(got)

    def retrievals(area: SearchArea) -> dict[str, ScoredKeys]:
        per: dict[str, ScoredKeys] = {}
        pending = None
        if use_fts and qvec is not None and getattr(backend, "retrieves_concurrently", False):
            # in a copy of this context: notes the store adds land in this search's (notices.py)
            pending = _retrievers.pool().submit(contextvars.copy_context().run,
                                                backend.vector_search, qvec, area, depth)
        if use_fts:
            per["fts"] = backend.text_search(text_query, area, depth)
        if pending is not None:
            # Meanwhile, what the text list's head will need (read, and judged by coverage)
            ahead = {d for d, _ in per["fts"][: pool if calibrated else head]}
            _fetch(backend, items, ahead)
            if calibrated:
                for doc in ahead & items.keys():
                    covered.of(doc, items[doc])
            per["vector"] = pending.result()
        elif qvec is not None:
            per["vector"] = backend.vector_search(qvec, area, depth)
        return per

    lists: dict[tuple[str, ...], dict[str, ScoredKeys]] = {}
    retrieve(retrievals)
    answered = _answered_by(lists)
    if answered == "none" and plan.mode == "hybrid":
        words = textquery.plain_words(parsed.embed_text)
        lists.clear()
        retrieve(lambda area: {"substring": backend.substring_search(words, area, depth)})
        answered = "substring" if any(per["substring"] for per in lists.values()) else "none"

    heads = {d for per in lists.values() for sc in per.values() for d, _ in sc[:head]}
    _fetch(backend, items, heads | (_list_heads(lists, pool) if calibrated else _pool_ahead(lists, pool)))

    vectors = _vectors(backend, items, heads) if plan.dedup_cosine is not None else {}
    token_sets: dict[Key, frozenset[str]] = {}  # each text tokenized once per search (dedup)
    fused_groups = [_fuse_group(plan, lists[g], items, vectors, token_sets, covered, background)
                    for g in groups]

    merged_scores: dict[Key, float] = {}
    if len(fused_groups) > 1:  # merge="rrf": each corpus gets equal say
        merged = fusion_lib.rrf([fg.order for fg in fused_groups], k=plan.rrf_k)
        merged_scores = dict(merged)
        order = [doc for doc, _ in merged]
    else:
        order = fused_groups[0].order if fused_groups else []

    order = order[:pool]
    _fetch(backend, items, set(order))  # nothing left to read unless lists were fused
    order = [doc for doc in order if doc in items]  # gone since retrieval: deleted meanwhile
    candidates: dict[Key, _Candidate] = {}
    only = fused_groups[0] if len(fused_groups) == 1 else None
    for doc in order:
        owner = only if only is not None else next(fg for fg in fused_groups if doc in fg.fused)
        cand = candidates[doc] = owner.candidate(doc, items[doc])
        if merged_scores:  # the interleaving's score, as a share of a corpus's first place
            cand.fused, cand.merged = merged_scores[doc], True
            cand.relevance = min(1.0, merged_scores[doc] * (plan.rrf_k + 1))
    # Each list was collapsed apart; copies that survived in different lists (or corpora)
    # meet here.
    order, absorbed = _collapse(plan, order, items, vectors,
                                {d: candidates[d].relevance for d in order}, token_sets)
    for survivor, others in absorbed.items():
        alt = candidates[survivor].alternates
        for other in others:
            alt.extend(a for a in [other, *candidates[other].alternates] if a not in alt)
    shown = set(order)  # a copy absorbed in one list may survive in another: it is a hit then
    for doc in order:
        candidates[doc].alternates = [a for a in candidates[doc].alternates if a not in shown]

    boosts = _Boosts(plan.policy, now)
    final = {doc: _final(candidates[doc], boosts.of(items[doc])) for doc in order}
    if plan.min_score is not None:
        order = [d for d in order if final[d][0] >= plan.min_score - 1e-12]
    # Rank the head by its final score (ties by id); only the page becomes Hit objects.
    ranked = sorted(order, key=lambda doc: (-final[doc][1], items[doc].id))
    reranked: dict[Key, float] = {}
    if rerank is not None and parsed.embed_text.strip():  # the query without its operators
        ranked, reranked = _rerank(rerank, parsed.embed_text, ranked, items, result_notes)
    page = [_hit(doc, candidates[doc], items, boosts, labels, reranked.get(doc))
            for doc in ranked[plan.offset : plan.offset + plan.limit]]
    best = max((candidates[d].calibrated for d in ranked), default=None)
    confidence = calibration.confidence(best)
    if confidence == "none" and best is not None:
        result_notes.append(f"no confident match: best calibrated relevance {best:.2f}")
    return SearchResult(hits=page, answered_by=answered, mode=plan.mode, query=plan.query,
                        notes=result_notes, confidence=confidence)


def _list_heads(lists: dict[tuple[str, ...], dict[str, ScoredKeys]], pool: int) -> set[Key]:
    """Every list's first `pool`: the candidates a calibrated fusion judges."""
    return {d for per in lists.values() for sc in per.values() for d, _ in sc[:pool]}


def _rerank(rerank: Reranker, query: str, ranked: list[Key], items: dict[Key, StoredItem],
            notes: list[str]) -> tuple[list[Key], dict[Key, float]]:
    """The first `depth` hits in the reranker's order (ties keep theirs), the rest as they were.
    A reranker is code the caller brings: when it fails or answers nonsense the search keeps
    its fused order and says so in a note, never raises."""
    head, depth = ranked[: rerank.depth], rerank.depth
    try:
        scores = [float(x) for x in rerank.score(query, [items[doc].text for doc in head])]
    except Exception as exc:  # any failure of the caller's model
        notes.append(f"the reranker failed ({type(exc).__name__}: {exc}): hits are in fused order")
        return ranked, {}
    if len(scores) != len(head) or not all(math.isfinite(s) for s in scores):
        notes.append(f"the reranker gave {len(scores)} scores for {len(head)} texts"
                     f"{'' if len(scores) != len(head) else ', some not finite'}: hits are in fused order")
        return ranked, {}
    by = dict(zip(head, scores, strict=True))
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    return [head[i] for i in order] + ranked[depth:], by


def _by_corpus(per: dict[str, ScoredKeys], items: dict[Key, StoredItem]
               ) -> dict[tuple[str, ...], dict[str, ScoredKeys]]:
    """One retrieval's lists over several corpora as one group of lists per corpus (each
    list keeping its order); keys whose item is gone since are dropped."""
    out: dict[tuple[str, ...], dict[str, ScoredKeys]] = {}
    for name, scored in per.items():
        for doc, score in scored:
            if doc in items:
                out.setdefault((items[doc].corpus,), {n: [] for n in per})[name].append((doc, score))
    return out


def _pool_ahead(lists: dict[tuple[str, ...], dict[str, ScoredKeys]], pool: int) -> set[Key]:
    """The ids the pool will hold when one list alone answers: its first `pool` (fusing one
    list keeps its order but for ties), read with the heads in one query. Fused lists can
    place anything in the pool; what a pool lacks is read once it is known."""
    answered = [sc for per in lists.values() for sc in per.values() if sc]
    return {d for d, _ in answered[0][:pool]} if len(answered) == 1 else set()


def _fetch(backend: Backend, items: dict[Key, StoredItem], keys: set[Key]) -> None:
    """Read the items not read yet (one query); keys whose item is gone stay absent."""
    missing = keys.difference(items)
    if missing:
        items.update(backend.items_by_key(sorted(missing)))


def _vectors(backend: Backend, items: dict[Key, StoredItem], keys: set[Key]) -> dict[Key, Vector]:
    """The stored vectors of the items read under `keys` (for the collapse by cosine)."""
    key_of = {items[k].id: k for k in keys if k in items}
    return {key_of[i]: v for i, v in backend.vectors_for(sorted(key_of)).items()}


def _answered_by(lists: dict[tuple[str, ...], dict[str, ScoredKeys]]) -> str:
    found = {name for per in lists.values() for name, scored in per.items() if scored}
    if {"fts", "vector"} <= found:
        return "hybrid"
    if found:
        return found.pop()
    return "none"


def _fuse_group(
    plan: SearchPlan, per: dict[str, ScoredKeys], items: dict[Key, StoredItem],
    vectors: dict[Key, Vector], token_sets: dict[Key, frozenset[str]],
    covered: _Covered, background: Background | None,
) -> _Group:
    """Collapse each list's head and fuse the lists."""
    names, scored_lists, weights = [], [], []
    alternates: dict[Key, list[Key]] = {}
    head, pool = _heads(plan)
    for name, scored in per.items():
        # Collapse duplicates in the head (read from the store); the tail only informs fusion.
        top = [d for d, _ in scored[:head] if d in items]
        kept, absorbed = _collapse(plan, top, items, vectors, _shares(scored[:head]), token_sets)
        keep = set(kept)
        scored = [(d, s) for d, s in scored[:head] if d in keep] + list(scored[head:])
        names.append(name)
        scored_lists.append(scored)
        weights.append(plan.weights[1] if name == "vector" else plan.weights[0])
        for survivor, others in absorbed.items():
            alt = alternates.setdefault(survivor, [])
            alt.extend(a for a in others if a not in alt)
    lists = dict(zip(names, scored_lists, strict=True))
    judge = _Judge(lists, covered, background)
    present = [i for i, s in enumerate(scored_lists) if s]
    if not present:
        return _Group([], {}, 0.0, lists, alternates, judge)
    if plan.fusion == "calibrated":  # rank every list's first `pool` by calibrated relevance
        keys = dict.fromkeys(d for scored in scored_lists for d, _ in scored[:pool] if d in items)
        scores = {d: judge.of(d, items[d])[1] for d in keys}
        order = sorted(scores, key=lambda d: (-scores[d], items[d].id))[:pool]
        return _Group(order, scores, 1.0, lists, alternates, judge)
    fused, best = fusion_lib.fuse_with_best(
        plan.fusion, [scored_lists[i] for i in present], weights=[weights[i] for i in present],
        k=plan.rrf_k, top=pool)
    return _Group([doc for doc, _ in fused], dict(fused), best, lists, alternates, judge)


def _collapse(
    plan: SearchPlan, order: list[Key], items: dict[Key, StoredItem], vectors: dict[Key, Vector],
    scores: dict[Key, float], token_sets: dict[Key, frozenset[str]],
) -> tuple[list[Key], dict[Key, list[Key]]]:
    """Near-duplicate collapse by token Jaccard (never across a gap in `scores`, 0-1) and,
    when asked, by vector cosine."""
    absorbed: dict[Key, list[Key]] = {}
    if plan.dedup_threshold is not None and len(order) > 1:
        order, absorbed = dedup.collapse([(d, items[d].text) for d in order], plan.dedup_threshold,
                                         scores=scores, token_sets=token_sets,
                                         prints={d: items[d].word_print for d in order})
    if plan.dedup_cosine is not None and len(order) > 1:
        order, by_vector = dedup.collapse_by_vectors(order, vectors, plan.dedup_cosine)
        for survivor, others in by_vector.items():
            merged = absorbed.setdefault(survivor, [])
            for other in others:
                merged.extend([other, *absorbed.pop(other, [])])
    return order, absorbed


def _shares(scored: ScoredKeys) -> dict[Key, float]:
    """Each score as a share of the list's best (1.0 for all when the best is not > 0)."""
    top = scored[0][1] if scored else 0.0
    return {d: (s / top if top > 0 else 1.0) for d, s in scored}


class _Boosts:
    """The policy's factors of the items one search ranks, worked out once per distinct
    (kind, access count, recency): the few dozen items of a pool mostly share them."""

    def __init__(self, policy: ScorePolicy, now: float) -> None:
        self.policy, self.now = policy, now
        self._known: dict[tuple[str | None, int | None, bool], tuple[dict[str, float], float]] = {}

    def of(self, item: StoredItem) -> tuple[dict[str, float], float]:
        """(the item's factors by name, their product); the dict is shared: copy to hand out."""
        key = (item.kind, item.access_count, self.policy.recent(item.created_at, self.now))
        known = self._known.get(key)
        if known is None:
            factors = self.policy.factors(kind=item.kind, access_count=item.access_count,
                                          created_at=item.created_at, now=self.now)
            known = self._known[key] = (factors, apply(1.0, factors))
        return known


def _final(cand: _Candidate, boost: tuple[dict[str, float], float]) -> tuple[float, float]:
    """(the score shown, the key ranked by): the boosted relevance, both (under merge="rrf"
    the relevance is the interleaving's, so the page stays in score order)."""
    shown = boosted_by(cand.relevance, boost[1])
    return shown, shown


def _hit(
    doc: Key, cand: _Candidate, items: dict[Key, StoredItem], boosts: _Boosts,
    labels: dict[str, str], rerank_score: float | None = None,
) -> Hit:
    item = items[doc]
    factors, product = boosts.of(item)
    return Hit(
        id=item.id, corpus=item.corpus, text=item.text, title=item.title, kind=item.kind,
        score=boosted_by(cand.relevance, product), relevance=cand.relevance,
        fusion_score=cand.fused, boosts=dict(factors),
        evidence={**(cand.owner.judge.shown(doc, item, cand.evidence).to_dict() if cand.evidence else {}),
                  "calibrated": cand.calibrated},
        source_label=_label(item, labels), source_url=item.source_url,
        metadata=item.metadata, created_at=item.created_at, retrievers=cand.owner.retrievers(doc),
        alternate_sources=[{"id": items[a].id, "source": _label(items[a], labels)}
                           for a in cand.alternates if a in items],
        rerank_score=rerank_score,
    )


def _label(item: StoredItem, labels: dict[str, str]) -> str:
    return source_label(corpus=item.corpus, kind=item.kind, title=item.title, item_id=item.id,
                        metadata=item.metadata, template=labels.get(item.corpus))


# A backend whose retrievals are a server's work on pooled connections (PostgreSQL:
# `retrieves_concurrently`) answers a hybrid search's two at once: the vector search on
# a worker thread while the caller's thread asks for the text.
_retrievers = Workers(4, "hybridkb-retrieve")
