"""KnowledgeBase: the one entry class every face (API, CLI, MCP) goes through."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from . import batches, item_input, noise, pipeline, selection, store_filters, validation
from .embedding import Embedder, content_hash
from .errors import EmbedderMismatchError, InvalidInputError, NotFoundError, StoreError
from .model import (
    Filters,
    Item,
    SearchResult,
    StoredItem,
    now_ts,
    parse_filters,
)
from .scoring import ScorePolicy
from .storage import asked, records
from .storage.contract import Backend, Vector
from .storage.records import (
    META_EMBEDDER,
    META_EMBEDDER_NAME,
    META_EMBEDDER_VERSION,
    META_LABEL_TEMPLATES,
    META_PENDING_EMBEDDER,
)
from .version import package_version as _package_version

MEMORY_CORPUS = "memory"

Progress = Callable[[int], None]
CORPUS_SETTINGS = "corpus_settings:"  # meta key prefix: one JSON object per corpus
EMBED_BATCH = 256  # items per embedding transaction when draining the queue

_UNSET: Any = object()  # tells a deprecated keyword that was not given from one given as None


class NewerSchemaWarning(UserWarning):
    """The store was made by a newer hybridkb: it opens for reading, and writes are refused."""


def _deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=3)


class KnowledgeBase:
    """Items in named corpora, searched with BM25 and vectors fused.

    Open one with `hybridkb.open(path_or_url)`. Thread-safe for use from one
    process; several processes may share one SQLite file (WAL).
    """

    def __init__(self, backend: Backend, embedder: Embedder | None, *,
                 score_policy: ScorePolicy | None = None, embed: str = "sync",
                 sample_queries: bool = True, reranker: pipeline.Reranker | None = None) -> None:
        self.backend = backend
        self.embedder, self.reranker = embedder, reranker  # the rerank stage: embedding/rerank.py
        self._asked = asked.QuerySampler(lambda rows, closing: backend.keep_query_vectors(  # asked.py
            rows, now_ts(), measure=not closing), enabled=bool(sample_queries))
        self.score_policy = score_policy or ScorePolicy()
        self._noise = noise.NoiseFloor()  # the background cosine calibration judges against
        self.embed_mode = validation.check_embed_mode(embed)
        self._vector_problem: EmbedderMismatchError | None = None
        if backend.newer_schema is not None:
            warnings.warn(f"{backend.url}: {backend.newer_schema}", NewerSchemaWarning, stacklevel=3)
            self._refresh_vector_problem()
        else:
            self._check_embedder()

    # -- lifecycle --------------------------------------------------------------------------

    def _check_embedder(self) -> None:
        if self.embedder is None:
            return
        if self.backend.get_meta(META_EMBEDDER) is None \
                and self.backend.vector_dim() in (None, self.embedder.dim):
            self.backend.ensure_vector_storage(self.embedder.dim)
            self.backend.set_meta(META_EMBEDDER, self.embedder.model_id)
            self._record_model()
        self._refresh_vector_problem()

    def _record_model(self) -> None:
        """Name and version beside the model id (the backend records `vector_dim`)."""
        assert self.embedder is not None
        self.backend.set_meta(META_EMBEDDER_NAME, self.embedder.name)
        self.backend.set_meta(META_EMBEDDER_VERSION, str(self.embedder.version))

    def _refresh_vector_problem(self) -> None:
        """Compare the recorded model with ours; another process may have re-embedded the store."""
        if self.embedder is None:
            return
        recorded = self.backend.get_meta(META_EMBEDDER)
        current = self.embedder.model_id
        if recorded is None:  # vectors written by callers, without a model
            dim = self.backend.vector_dim()
            recorded = None if dim in (None, self.embedder.dim) else f"an unrecorded {dim}-dim model"
        if recorded is None or recorded == current:
            self._vector_problem = None
            return
        if self.backend.get_meta(META_PENDING_EMBEDDER) == current:
            fix = f"run `hybridkb reembed` to finish switching it to {current!r}"
        else:
            fix = f"run `hybridkb reembed` to switch it to {current!r}"
        self._vector_problem = EmbedderMismatchError(
            f"this store was embedded with {recorded!r} but is opened with {current!r}; "
            f"open it with the same model, or {fix} (full-text search keeps working meanwhile)")

    @property
    def embedder_name(self) -> str | None:
        return self.backend.get_meta(META_EMBEDDER)

    @property
    def has_vectors(self) -> bool:
        """True when vector search works: a model, and the one the store records."""
        self._refresh_vector_problem()
        return self.embedder is not None and self._vector_problem is None

    def close(self) -> None:
        self._asked.flush()
        self.backend.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------

    def add(self, text: str, *, embed: str | None = None, **fields: Any) -> str:
        """Add one item; returns its id. An existing id is an error (use `upsert`)."""
        return self.add_many([{"text": text, **fields}], embed=embed)[0]

    def upsert(self, text: str, *, embed: str | None = None, within: Sequence[str] | None = None,
               **fields: Any) -> str:
        """Insert or replace one item by id (created_at and access counts are kept);
        `within`: replace only an item of these corpora (else NotFoundError)."""
        return self.add_many([{"text": text, **fields}], replace=True, embed=embed,
                             within=within)[0]

    def add_many(
        self, items: Iterable[Item | Mapping[str, Any]], *, replace: bool = False,
        batch_size: int | None = None, progress: Progress | None = None, embed: str | None = None,
        within: Sequence[str] | None = None,
    ) -> list[str]:
        """Add items in batches; each batch is one transaction (all of it or none).

        `batch_size`: items per batch. Unset: 256 while the model embeds them on the way;
        while nothing is to embed (vectors given, `embed="defer"`, no model) from 256,
        each batch twice the last, up to 10,000, which writes a large load faster (batches.py).

        Vectors are computed for new or changed text only (by content hash), before the
        commit with `embed="sync"`, later with `embed="defer"` (default: `self.embed_mode`).
        `within` (with `replace`): an existing item is replaced only when it is in one of these
        corpora, checked by the write itself; else NotFoundError and its batch is not written.
        """
        if batch_size is not None:
            validation.check_batch_size(batch_size)
        if not isinstance(replace, bool):
            raise InvalidInputError(f"replace must be true or false, got {replace!r:.60}")
        within = None if within is None else validation.corpus_names(within)
        if progress is not None and not callable(progress):
            raise InvalidInputError("progress must be a callable taking a count")
        if isinstance(items, Item | Mapping | str | bytes) or not isinstance(items, Iterable):
            raise InvalidInputError(f"items must be a list of items, not {type(items).__name__}")
        defer = validation.check_embed_mode(self.embed_mode if embed is None else embed) == "defer"
        dim = self._input_dim()  # asked once a batch, not once an item (a query each)

        def read_dim() -> None:
            nonlocal dim
            dim = self._input_dim()

        embeds = self.embedder is not None and not defer

        def batch_limit(prepared: batches.Prepared) -> int:
            if batch_size is not None:
                return batch_size
            return batches.BATCH if embeds and prepared[1] is None else batches.LARGE_BATCH

        with self.backend.bulk_writes():  # searchable by text when this returns
            return batches.write_batches(
                items, lambda raw: item_input.prepare(raw, dim),
                lambda batch, prints: self._write_batch(batch, replace, defer, prints, within),
                batch_limit, progress, ramp_from=None if batch_size is not None else batches.BATCH,
                after_batch=read_dim)

    def upsert_many(self, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> list[str]:
        return self.add_many(items, replace=True, **options)

    def check_item(self, raw: Item | Mapping[str, Any]) -> None:
        """Raise the error `add` would raise for this item (naming it), without writing it."""
        item_input.prepare(raw, self._input_dim())

    def _input_dim(self) -> int | None:
        """The size a caller's vector must have: the store's, else the model's (None: any)."""
        dim = self.backend.vector_dim()
        if dim is None and self.embedder is not None:
            dim = self.embedder.dim
        return dim

    def _write_batch(self, batch: list[tuple[Item, Vector | None]], replace: bool, defer: bool,
                     prints: list[int] | None, within: list[str] | None) -> list[str]:
        items = [it for it, _ in batch]
        seen: set[str] = set()
        for it in items:
            assert it.id is not None
            if it.id in seen:
                raise InvalidInputError(f"item {it.id!r} appears twice in one batch")
            seen.add(it.id)
        hashes = [content_hash(it.embedding_text) for it in items]
        vectors: list[Vector | None] = [v for _, v in batch]
        if any(v is not None for v in vectors) and self.backend.vector_dim() is None:
            dim = next(v for v in vectors if v is not None).size
            self.backend.ensure_vector_storage(dim)
        if self.embedder is not None:
            self._refresh_vector_problem()
            if self._vector_problem is not None:
                raise self._vector_problem
            unchanged = self.backend.embedded_hashes([it.id for it in items]) if replace else {}  # type: ignore[misc]
            todo = [i for i, it in enumerate(items)
                    if vectors[i] is None and unchanged.get(it.id) != hashes[i]]  # type: ignore[arg-type]
            if todo and not defer:  # a deferred write leaves every changed text to the queue
                embedded = self.embedder.embed_documents([items[i].embedding_text for i in todo])
                for i, vec in zip(todo, embedded, strict=True):
                    vectors[i] = vec
        self.backend.upsert(items, vectors, hashes, replace=replace, prints=prints, within=within)
        return [it.id for it in items]  # type: ignore[misc]

    def delete(self, item_id: str, *, within: Sequence[str] | None = None) -> bool:
        """Delete one item; False when it did not exist (or, with `within`, is in none of
        those corpora: decided by the delete itself)."""
        return self.delete_many([item_id], within=within) > 0

    def delete_many(self, ids: Sequence[str], *, within: Sequence[str] | None = None) -> int:
        return self.backend.delete(validation.lookup_ids(ids), within=None if within is None
                                   else validation.corpus_names(within))

    def purge_expired(self) -> int:
        """Delete every expired item; returns how many."""
        return self.backend.purge_expired(now_ts())

    # -- reads ------------------------------------------------------------------------------

    def get(self, item_id: str, *, include_expired: bool = False) -> StoredItem:
        found = self.backend.get(validation.lookup_ids([item_id]), include_expired=include_expired,
                                 now=now_ts())
        if not found:
            raise NotFoundError(f"no item with id {item_id!r}")
        return found[0]

    def get_many(self, ids: Sequence[str], *, include_expired: bool = False) -> list[StoredItem]:
        """The items that exist, in the order asked; missing ids are skipped."""
        return self.backend.get(validation.lookup_ids(ids), include_expired=include_expired, now=now_ts())

    def count(self, corpus: str | None = None) -> int:
        return self.backend.count(corpus)

    def corpora(self) -> dict[str, int]:
        """Corpus name -> number of items."""
        return self.backend.corpora()

    def iter_items(
        self, *, batch_size: int = 500, corpus: str | None = None,
        corpora: Sequence[str] | str | None = None, filters: Filters | Mapping[str, Any] | None = None,
    ) -> Iterator[StoredItem]:
        """Every item in storage order (expired and stale ones too), or those `corpus`/`corpora`
        and `filters` select; `filters` work as in `search` (expired and stale items then
        left out unless include_expired / include_stale)."""
        names = selection.pick_corpora(corpus, corpora)
        wanted = None if names is None else {names} if isinstance(names, str) else set(names)
        parsed = None if filters is None else \
            parse_filters(dict(filters) if isinstance(filters, Mapping) else filters)
        now = now_ts()
        for batch in self.backend.iter_items(batch_size):
            for item in batch:
                if (wanted is None or item.corpus in wanted) \
                        and (parsed is None or selection.item_matches(item, parsed, now)):
                    yield item

    def export_batches(
        self, *, batch_size: int = 500, vectors: bool = False, corpora: Sequence[str] | None = None,
    ) -> Iterator[list[tuple[StoredItem, Vector | None]]]:
        """Every item (expired and stale ones too) in storage order, batch by batch.

        Each batch is read consistently; with `vectors`, each item comes with its stored
        vector (None when it has none, or when the store holds no vectors at all).
        `corpora` keeps only items of those corpora.
        """
        wanted = set(corpora) if corpora else None
        with_vectors = vectors and self.vector_dim is not None
        for batch in self.backend.iter_items(batch_size):
            if wanted is not None:
                batch = [it for it in batch if it.corpus in wanted]
            found = self.backend.vectors_for([it.id for it in batch]) \
                if with_vectors and batch else {}
            yield [(it, found.get(it.id)) for it in batch]

    @property
    def target(self) -> str:
        """Where the store lives: a file path, or a PostgreSQL URL with the password hidden."""
        return self.backend.url

    @property
    def vector_dim(self) -> int | None:
        """The dimension of the stored vectors; None before any vector is stored."""
        return self.backend.vector_dim()

    @property
    def bm25_weights(self) -> tuple[float, float] | None:
        """The (title, text) column weights full-text search ranks with, when the backend has them."""
        weights = getattr(self.backend, "bm25_weights", None)
        return None if weights is None else (float(weights[0]), float(weights[1]))

    def stats(self) -> dict[str, Any]:
        dim = self.vector_dim
        missing = len(self.backend.ids_missing_vectors(10**9)) if dim is not None else None
        out = {
            "target": self.target,
            "items": self.count(),
            "corpora": self.corpora(),
            "embedder": self.embedder_name,
            "vector_dim": dim,
            "items_without_vectors": self.count() if missing is None else missing,
            "reembed_pending": self.backend.get_meta(META_PENDING_EMBEDDER),
            "awaiting_embedding": missing if missing is not None and self.has_vectors else 0,
            "version": _package_version(),
        }
        if self.backend.newer_schema is not None:
            out["read_only"] = self.backend.newer_schema
        return out

    def awaiting_embedding(self) -> int:
        """How many items wait for a vector from this store's model (0 without a model)."""
        usable = self.embedder is not None and self.backend.vector_dim() is not None and self.has_vectors
        return len(self.backend.ids_missing_vectors(10**9)) if usable else 0

    # -- search -----------------------------------------------------------------------------

    def search(
        self, query: str, *, mode: str = "hybrid", limit: int = 10, offset: int = 0,
        corpus: str | None = None, corpora: Sequence[str] | str | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        fusion: str | None = None, weights: Sequence[float] | None = None,
        rrf_k: float = pipeline.fusion_lib.RRF_K, depth: int | None = None,
        dedup_threshold: float | None = pipeline.dedup.DEFAULT_THRESHOLD,
        dedup_cosine: float | None = None,
        score_policy: ScorePolicy | None = None, min_score: float | None = None,
        merge: str = pipeline.DEFAULT_MERGE, syntax: bool = True,
        touch: bool = False, dedup: Any = _UNSET, explain: Any = _UNSET,
    ) -> SearchResult:
        """Hybrid search. A query's text never raises; bad options raise InvalidInputError.
        It reads `"phrase" +word -word prefix* title:/kind:/corpus:/path:/language:` (docs/cli.md;
        `syntax=False`: plain words). `corpus="x"` searches one corpus, `corpora=[...]` several
        (default: all). `mode` is one of `model.MODES`, `fusion` one of `fusion.FUSIONS`. Several
        corpora are searched as one (`merge="relevance"`); `merge="rrf"` fuses each corpus apart
        and interleaves them by rank, so each corpus gets equal say. Each hit's `score` is
        a calibrated relevance in [0, 1] (docs/scoring.md); `min_score` drops hits below it.
        `dedup_threshold`: the token Jaccard at which near-duplicates collapse (None: off);
        `dedup_cosine` adds a cosine test. Every hit carries its explanation (ranks, raw
        scores, evidence, boosts). Deprecated, removed in the next release: `dedup` (now
        `dedup_threshold`) and `explain` (explanations are always on hits).
        """
        if dedup is not _UNSET:
            _deprecated("search(dedup=...) is deprecated; use dedup_threshold=...")
            dedup_threshold = dedup
        if explain is not _UNSET:
            _deprecated("search(explain=...) is deprecated and does nothing: every hit carries "
                        "its explanation (hit.retrievers, fusion_score, boosts)")
        opts = validation.search_options(
            mode=mode, limit=limit, offset=offset, fusion=fusion, weights=weights, rrf_k=rrf_k,
            depth=depth, dedup_threshold=dedup_threshold, dedup_cosine=dedup_cosine,
            min_score=min_score, touch=touch)
        if score_policy is not None and not isinstance(score_policy, ScorePolicy):
            raise InvalidInputError(f"score_policy must be a ScorePolicy, got {score_policy!r:.60}")
        plan = pipeline.SearchPlan(
            query=query if isinstance(query, str) else "", mode=opts["mode"], limit=opts["limit"],
            offset=opts["offset"],
            filters=parse_filters(dict(filters) if isinstance(filters, Mapping) else filters),
            fusion=opts["fusion"] or pipeline.DEFAULT_FUSION,
            weights=opts["weights"] if opts["weights"] is not None else pipeline.DEFAULT_WEIGHTS,
            rrf_k=opts["rrf_k"], depth=opts["depth"], dedup_threshold=opts["dedup_threshold"],
            dedup_cosine=opts["dedup_cosine"], policy=score_policy or self.score_policy,
            min_score=opts["min_score"], merge=merge, syntax=bool(syntax),
        )
        plan.validate()
        with getattr(self.backend, "pinned_reads", nullcontext)():  # SQLite: one change check
            names = selection.resolve_corpora(self.corpora(), selection.pick_corpora(corpus, corpora))
            reading = store_filters.Reading(self.corpus_settings, self.backend.value_counts)
            notes: list[str] = []
            embed = self._query_embedder(mode, notes)
            awaiting = selection.awaiting_note(self.backend.ids_missing_vectors, names) if embed else None
            if awaiting:  # in the searched corpora only: a restricted server shows no other's count
                notes.append(awaiting)
            bg = embed and self._noise.get(self.backend, self.embedder, self.corpora(), now_ts(), notes)
            result = pipeline.run(plan, self.backend, corpora=names, now=now_ts(), embed_query=embed,
                                  labels=self.label_templates(), notes=notes, rerank=self.reranker,
                                  place=reading.place, background=bg)
            reading.check(result.hits)  # a typo in a kind or language finds nothing: say so
        if touch and result.hits:
            self.backend.touch([h.id for h in result.hits], now_ts())
        return result

    def _query_embedder(self, mode: str, notes: list[str]) -> pipeline.QueryEmbedder | None:
        if mode == "fts":
            return None
        self._refresh_vector_problem()
        if self._vector_problem is not None:
            if mode == "vector":
                raise self._vector_problem
            notes.append(str(self._vector_problem))
            return None
        if self.embedder is None:
            if mode == "vector":
                raise EmbedderMismatchError(
                    "vector search needs an embedder; this store was opened without one")
            notes.append("no embedder: full-text search only")
            return None
        return self._asked.noting(self.embedder.embed_query)

    def label_templates(self) -> dict[str, str]:
        """Corpus -> the label template its hits use (see `set_label_template`)."""
        raw = self.backend.get_meta(META_LABEL_TEMPLATES)
        return json.loads(raw) if raw else {}

    def set_label_template(self, corpus: str, template: str) -> None:
        """Label hits of `corpus` with a template like "[ticket: {title}]" (metadata keys allowed)."""
        labels = self.label_templates()
        validation.check_label_template(template)
        labels[validation.check_name("corpus", corpus)] = template
        self.backend.set_meta(META_LABEL_TEMPLATES, json.dumps(labels))

    def corpus_settings(self, corpus: str) -> dict[str, Any]:
        """What the store remembers about a corpus (e.g. the folder `index` mirrors into it)."""
        raw = self.backend.get_meta(CORPUS_SETTINGS + validation.check_name("corpus", corpus))
        value = json.loads(raw or "{}")
        return value if isinstance(value, dict) else {}

    def set_corpus_settings(self, corpus: str, **values: Any) -> None:
        """Merge `values` (JSON values; None removes a key) into the corpus's settings."""
        settings = {k: v for k, v in {**self.corpus_settings(corpus), **values}.items() if v is not None}
        self.backend.set_meta(CORPUS_SETTINGS + corpus, json.dumps(settings, sort_keys=True))

    # -- memory -----------------------------------------------------------------------------

    def remember(
        self, text: str, *, kind: str = "memory", scope: str | None = None,
        ttl: float | timedelta | None = None, metadata: Mapping[str, Any] | None = None,
        corpus: str = MEMORY_CORPUS, **fields: Any,
    ) -> str:
        """Store a memory (a decision, lesson, note...); returns its id."""
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a JSON object, not {type(metadata).__name__}")
        return self.add(text, kind=kind, scope=scope, ttl=ttl, corpus=corpus,
                        metadata=dict(metadata or {}), **fields)

    def recall(self, query: str, *, limit: int = 10, corpus: str | None = None,
               corpora: Sequence[str] | str | None = None, **options: Any) -> SearchResult:
        """Search memories with the score policy on, and count each returned hit as accessed."""
        corpora = selection.pick_corpora(corpus, corpora)
        if corpora is None:
            corpora = [MEMORY_CORPUS] if MEMORY_CORPUS in self.corpora() else None
        options.setdefault("touch", True)
        return self.search(query, limit=limit, corpora=corpora, **options)

    def forget(self, item_id: str) -> bool:
        return self.delete(item_id)

    # -- maintenance ------------------------------------------------------------------------

    def optimize(self) -> dict[str, Any]:
        """Bring the derived indexes (SQLite: the text index, the vector base and its graph)
        fully up to date now, in the foreground, instead of leaving it to later searches
        and background threads. Returns what was done ({} when the backend derives none)."""
        optimize = getattr(self.backend, "optimize", None)
        done = optimize() if optimize is not None else None
        return dict(done) if done else {}

    def check(self, *, repair: bool = False) -> dict[str, Any]:
        """The store's health: the database's own integrity check and the store's (items,
        full-text rows, vectors and derived indexes agree), each problem with what to do.

        With `repair`, whatever derives from the items is rebuilt, items whose vector was
        dropped are embedded again (when this store's model is at hand), and the store is
        checked again. Returns {"target", "ok", "problems": [{"problem", "fix"}], "repaired"}.
        """
        problems = self.backend.integrity_problems()
        repaired: list[str] = []
        if repair and problems:
            try:
                repaired = self.backend.repair()
            except StoreError as exc:
                repaired = [f"repair failed and changed nothing: {exc.__cause__ or exc}"]
            else:
                if self.has_vectors and (embedded := self.reembed()):
                    repaired.append(f"embedded {embedded} items again")
            problems = self.backend.integrity_problems()
        return {"target": self.target, "ok": not problems, "repaired": repaired,
                "problems": [{"problem": p, "fix": records.advice(p)} for p in problems]}

    def reembed(self, *, batch_size: int = 64, progress: Progress | None = None) -> int:
        """Give every item a vector from this store's embedder; returns how many were embedded.

        Switching to another model writes the new vectors beside the old ones, in
        batches (one transaction each), and swaps them in with the recorded model in
        one transaction at the end: until then the store keeps its old model and
        vector search keeps working for it. A crash midway loses at most one batch;
        running `reembed` again with the same model continues where it stopped.
        Afterwards items still lacking a current vector (new or changed meanwhile,
        or written without a model) are embedded in place.
        """
        if self.embedder is None:
            raise InvalidInputError("reembed needs an embedder")
        validation.check_batch_size(batch_size)
        model, dim = self.embedder.model_id, self.embedder.dim
        recorded = self.backend.get_meta(META_EMBEDDER)
        done = 0
        if self.backend.vector_dim() not in (None, dim) or recorded not in (None, model):
            self.backend.begin_reembed(model, dim)
            after = ""
            while ids := self.backend.pending_missing_ids(after, batch_size):
                items = self.backend.get(ids, include_expired=True, now=now_ts())
                if items:
                    vectors = self.embedder.embed_documents([it.embedding_text for it in items])
                    self.backend.write_pending_vectors(
                        [it.id for it in items], list(vectors),
                        [content_hash(it.embedding_text) for it in items])
                    done += len(items)
                    if progress:
                        progress(len(items))
                after = ids[-1]
            self.backend.finish_reembed(model, dim)
            self._record_model()
        elif self.backend.get_meta(META_PENDING_EMBEDDER) is not None:
            self.backend.cancel_reembed()  # an unfinished switch to a model we no longer use
        if recorded is None:
            self.backend.set_meta(META_EMBEDDER, model)
            self._record_model()
        self._refresh_vector_problem()
        self.backend.ensure_vector_storage(dim)
        return done + self.embed_pending(batch_size=batch_size, progress=progress)

    def embed_pending(
        self, *, batch_size: int = EMBED_BATCH, progress: Progress | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Embed the items waiting for a vector, a transaction per batch; `stop` is asked between."""
        if self.embedder is None or not self.has_vectors:
            return 0
        validation.check_batch_size(batch_size)
        self.backend.ensure_vector_storage(self.embedder.dim)
        done, skipped = 0, set[str]()
        while not (stop is not None and stop()):
            ids = [i for i in self.backend.ids_missing_vectors(batch_size + len(skipped))
                   if i not in skipped][:batch_size]
            if not ids:
                break
            items = self.backend.get(ids, include_expired=True, now=now_ts())
            vectors = self.embedder.embed_documents([it.embedding_text for it in items])
            written = self.backend.write_vectors(
                [it.id for it in items], list(vectors),
                [content_hash(it.embedding_text) for it in items])
            if written < len(ids):  # rewritten or deleted since `get`: left to its writer
                skipped.update(ids)
            done += written
            if progress:
                progress(len(items))
        return done
