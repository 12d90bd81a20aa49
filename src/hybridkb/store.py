"""KnowledgeBase: the one entry class every face (API, CLI, MCP) goes through."""

from __future__ import annotations

import collections
import json
import math
import re
import string
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace as dc_replace
from datetime import timedelta
from typing import Any

import numpy as np

from . import pipeline
from .backends.base import Backend, Vector
from .embedding import Embedder, content_hash
from .errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    NotFoundError,
)
from .model import (
    INT64_MAX,
    ITEM_FIELDS,
    Filters,
    Item,
    SearchResult,
    now_ts,
    parse_filters,
    storable_text_problem,
    to_ts,
    valid_ts,
)
from .scoring import ScorePolicy

MAX_TEXT_CHARS = 1_000_000
MAX_ID_CHARS = 512
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")
MEMORY_CORPUS = "memory"

Progress = Callable[[int], None]
EMBED_MODES = ("sync", "defer")
CORPUS_SETTINGS = "corpus_settings:"  # meta key prefix: one JSON object per corpus
EMBED_BATCH = 256  # items per embedding transaction when draining the queue


def _check_name(kind: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.match(value) or not value.strip():
        raise InvalidInputError(
            f"{kind} must be a non-empty string of at most 128 printable characters: {value!r}")
    return value


MAX_METADATA_DEPTH = 32


def _check_metadata(metadata: object) -> None:
    """A JSON object with string keys whose strings every backend can store."""
    if not isinstance(metadata, dict):
        raise InvalidInputError("metadata must be a JSON object")
    stack: list[tuple[object, int]] = [(metadata, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise InvalidInputError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
        if isinstance(value, dict):
            for key, inner in value.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"metadata keys must be strings, not {key!r:.40}")
                if problem := storable_text_problem(key):
                    raise InvalidInputError(f"metadata key {key!r:.40} {problem}")
                stack.append((inner, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((inner, depth + 1) for inner in value)
        elif isinstance(value, str):
            if problem := storable_text_problem(value):
                raise InvalidInputError(f"metadata value {value!r:.40} {problem}")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidInputError(f"metadata holds {value!r}, which JSON cannot represent")
        elif value is not None and not isinstance(value, bool | int):
            raise InvalidInputError(f"metadata is not JSON-serializable: {type(value).__name__} value")


def _label(data: Mapping[str, Any]) -> object:
    """How an error names an item: its id, else the start of its text."""
    if data.get("id") is not None:
        return data["id"]
    text = data.get("text")
    return text[:40] if isinstance(text, str) else "?"


def _lookup_ids(ids: Sequence[str]) -> list[str]:
    """The ids worth asking a backend for: an id no item can have is simply not found."""
    if isinstance(ids, str):
        raise InvalidInputError("ids must be a list of strings, not one string")
    return [i for i in ids if isinstance(i, str) and i and len(i) <= MAX_ID_CHARS
            and storable_text_problem(i) is None]


def _ttl_seconds(ttl: float | timedelta | None) -> float | None:
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InvalidInputError(f"ttl must be a positive number of seconds, got {ttl!r}")
    return float(seconds)


class KnowledgeBase:
    """Items in named corpora, searched with BM25 and vectors fused.

    Open one with `hybridkb.open(path_or_url)`. Thread-safe for use from one
    process; several processes may share one SQLite file (WAL).
    """

    def __init__(self, backend: Backend, embedder: Embedder | None, *,
                 score_policy: ScorePolicy | None = None, embed: str = "sync") -> None:
        self.backend = backend
        self.embedder = embedder
        self.score_policy = score_policy or ScorePolicy()
        self.embed_mode = embed
        self._vector_problem: EmbedderMismatchError | None = None
        self._check_embedder()

    # -- lifecycle --------------------------------------------------------------------------

    def _check_embedder(self) -> None:
        if self.embedder is None:
            return
        if self.backend.get_meta("embedder") is None \
                and self.backend.vector_dim() in (None, self.embedder.dim):
            self.backend.ensure_vector_storage(self.embedder.dim)
            self.backend.set_meta("embedder", self.embedder.model_id)
            self._record_model()
        self._refresh_vector_problem()

    def _record_model(self) -> None:
        """Name and version beside the model id (the backend records `vector_dim`)."""
        assert self.embedder is not None
        self.backend.set_meta("embedder_name", self.embedder.name)
        self.backend.set_meta("embedder_version", str(self.embedder.version))

    def _refresh_vector_problem(self) -> None:
        """Compare the recorded model with ours; another process may have re-embedded the store."""
        if self.embedder is None:
            return
        recorded = self.backend.get_meta("embedder")
        current = self.embedder.model_id
        if recorded is None:  # vectors written by callers, without a model
            dim = self.backend.vector_dim()
            recorded = None if dim in (None, self.embedder.dim) else f"an unrecorded {dim}-dim model"
        if recorded is None or recorded == current:
            self._vector_problem = None
            return
        if self.backend.get_meta("pending_embedder") == current:
            fix = f"run `hybridkb reembed` to finish switching it to {current!r}"
        else:
            fix = f"run `hybridkb reembed` to switch it to {current!r}"
        self._vector_problem = EmbedderMismatchError(
            f"this store was embedded with {recorded!r} but is opened with {current!r}; "
            f"open it with the same model, or {fix} (full-text search keeps working meanwhile)")

    @property
    def embed_mode(self) -> str:
        """"sync": a write embeds its items before it commits; "defer": it commits text only.

        Deferred items wait in the pending-embeddings queue (items whose vector is
        missing or older than their text), are found by full text meanwhile, and get
        their vectors from `embed_pending` (`hybridkb embed`, `serve`, or the CLI's
        `index` / `import` right after their text commit).
        """
        return self._embed_mode

    @embed_mode.setter
    def embed_mode(self, mode: str) -> None:
        if mode not in EMBED_MODES:
            raise InvalidInputError(f"embed must be one of {', '.join(EMBED_MODES)}, got {mode!r}")
        self._embed_mode = mode

    @property
    def embedder_name(self) -> str | None:
        return self.backend.get_meta("embedder")

    @property
    def has_vectors(self) -> bool:
        """True when vector search works: a model, and the one the store records."""
        self._refresh_vector_problem()
        return self.embedder is not None and self._vector_problem is None

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------

    def add(self, text: str, *, embed: str | None = None, **fields: Any) -> str:
        """Add one item; returns its id. An existing id is an error (use `upsert`)."""
        return self.add_many([{"text": text, **fields}], embed=embed)[0]

    def upsert(self, text: str, *, embed: str | None = None, **fields: Any) -> str:
        """Insert or replace one item by id (created_at and access counts are kept)."""
        return self.add_many([{"text": text, **fields}], replace=True, embed=embed)[0]

    def add_many(
        self, items: Iterable[Item | Mapping[str, Any]], *, replace: bool = False,
        batch_size: int = 256, progress: Progress | None = None, embed: str | None = None,
    ) -> list[str]:
        """Add items in batches; each batch is one transaction (all of it or none).

        Vectors are computed for new or changed text only (by content hash), before
        the commit with `embed="sync"`, later with `embed="defer"` (default: the
        store's `embed_mode`).
        """
        mode = self.embed_mode if embed is None else embed
        if mode not in EMBED_MODES:
            raise InvalidInputError(f"embed must be one of {', '.join(EMBED_MODES)}, got {mode!r}")
        defer = mode == "defer"
        ids: list[str] = []
        batch: list[tuple[Item, Vector | None]] = []
        for raw in items:
            batch.append(self._prepare(raw))
            if len(batch) >= batch_size:
                ids.extend(self._write_batch(batch, replace, defer))
                if progress:
                    progress(len(batch))
                batch = []
        if batch:
            ids.extend(self._write_batch(batch, replace, defer))
            if progress:
                progress(len(batch))
        return ids

    def upsert_many(self, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> list[str]:
        return self.add_many(items, replace=True, **options)

    def check_item(self, raw: Item | Mapping[str, Any]) -> None:
        """Raise the error `add` would raise for this item (naming it), without writing it."""
        self._prepare(raw)

    def _prepare(self, raw: Item | Mapping[str, Any]) -> tuple[Item, Vector | None]:
        now = now_ts()
        if isinstance(raw, Item):
            metadata = dict(raw.metadata) if isinstance(raw.metadata, dict) else raw.metadata
            item, vector, ttl = dc_replace(raw, metadata=metadata), None, None
        elif isinstance(raw, Mapping):
            data = dict(raw)
            vector = data.pop("vector", None)
            ttl = data.pop("ttl", None)
            unknown = set(data) - ITEM_FIELDS
            if unknown:
                raise InvalidInputError(f"unknown item field(s): {', '.join(sorted(unknown))}")
            if data.get("metadata") is None:
                data.pop("metadata", None)
            for key in ("created_at", "updated_at", "expires_at", "last_accessed_at"):
                if data.get(key) is not None:
                    try:
                        data[key] = to_ts(data[key])
                    except InvalidInputError as exc:
                        raise InvalidInputError(f"item {_label(data)!r}: {key}: {exc}") from exc
            if "text" not in data:
                raise InvalidInputError("an item needs a text")
            item = Item(**data)
        else:
            raise InvalidInputError(f"an item is an Item or a dict, not {type(raw).__name__}")
        label = _label(item.to_dict())
        try:
            self._validate(item)
        except InvalidInputError as exc:
            raise InvalidInputError(f"item {label!r}: {exc}") from exc
        if item.id is None:
            item.id = uuid.uuid4().hex
        item.created_at = item.created_at if item.created_at is not None else now
        item.updated_at = now if item.updated_at is None else item.updated_at
        seconds = _ttl_seconds(ttl)
        if seconds is not None:
            item.expires_at = now + seconds
            if not valid_ts(item.expires_at):
                raise InvalidInputError(f"item {label!r}: ttl {ttl!r} ends after the year 9999")
        vec = None
        if vector is not None:
            vec = self._check_vector(vector, item.id)
        return item, vec

    def _validate(self, item: Item) -> None:
        if not isinstance(item.text, str) or not item.text.strip():
            raise InvalidInputError("text must be a non-empty string")
        if len(item.text) > MAX_TEXT_CHARS:
            raise InvalidInputError(f"text has {len(item.text)} characters; the limit is {MAX_TEXT_CHARS}")
        if problem := storable_text_problem(item.text):
            raise InvalidInputError(f"text {problem}")
        if item.id is not None and (not isinstance(item.id, str) or not item.id
                                    or len(item.id) > MAX_ID_CHARS):
            raise InvalidInputError(f"id must be a non-empty string of at most {MAX_ID_CHARS} characters")
        _check_name("corpus", item.corpus)
        for name in ("id", "corpus", "title", "kind", "scope", "repo", "namespace", "source_url"):
            value = getattr(item, name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise InvalidInputError(f"{name} must be a string")
            if problem := storable_text_problem(value):
                raise InvalidInputError(f"{name} {problem}")
        _check_metadata(item.metadata)
        for name in ("created_at", "updated_at", "expires_at", "last_accessed_at"):
            value = getattr(item, name)
            if value is not None and not valid_ts(value):
                raise InvalidInputError(f"{name} must be a finite timestamp of years 1 to 9999")
        if isinstance(item.access_count, bool) or not isinstance(item.access_count, int) \
                or not 0 <= item.access_count <= INT64_MAX:
            raise InvalidInputError("access_count must be an integer >= 0")
        if not isinstance(item.stale, bool):
            raise InvalidInputError("stale must be true or false")

    def _check_vector(self, vector: Any, item_id: str | None) -> Vector:
        try:
            vec = np.asarray(vector, dtype=np.float32)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(f"item {item_id!r}: vector is not a list of numbers") from exc
        if vec.ndim == 2 and vec.shape[0] == 1:  # one row of a batch, as embedders return it
            vec = vec[0]
        if vec.ndim != 1:
            raise InvalidInputError(f"item {item_id!r}: vector is not a flat list of numbers")
        dim = self.backend.vector_dim()
        if dim is None and self.embedder is not None:
            dim = self.embedder.dim
        if dim is not None and vec.size != dim:
            raise DimensionMismatchError(
                f"item {item_id!r}: vector has {vec.size} dimensions, the store uses {dim}")
        if not np.all(np.isfinite(vec)):
            raise InvalidInputError(f"item {item_id!r}: vector has NaN or infinite values")
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            raise InvalidInputError(f"item {item_id!r}: vector is all zeros")
        return vec / norm

    def _write_batch(self, batch: list[tuple[Item, Vector | None]], replace: bool,
                     defer: bool = False) -> list[str]:
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
            if todo and not defer:
                embedded = self.embedder.embed_documents([items[i].embedding_text for i in todo])
                for i, vec in zip(todo, embedded, strict=True):
                    vectors[i] = vec
        self.backend.upsert(items, vectors, hashes, replace=replace)
        return [it.id for it in items]  # type: ignore[misc]

    def delete(self, item_id: str) -> bool:
        """Delete one item; False when it did not exist."""
        return self.delete_many([item_id]) > 0

    def delete_many(self, ids: Sequence[str]) -> int:
        return self.backend.delete(_lookup_ids(ids))

    def purge_expired(self) -> int:
        """Delete every expired item; returns how many."""
        return self.backend.purge_expired(now_ts())

    # -- reads ------------------------------------------------------------------------------

    def get(self, item_id: str, *, include_expired: bool = False) -> Item:
        found = self.backend.get(_lookup_ids([item_id]), include_expired=include_expired, now=now_ts())
        if not found:
            raise NotFoundError(f"no item with id {item_id!r}")
        return found[0]

    def get_many(self, ids: Sequence[str], *, include_expired: bool = False) -> list[Item]:
        """The items that exist, in the order asked; missing ids are skipped."""
        return self.backend.get(_lookup_ids(ids), include_expired=include_expired, now=now_ts())

    def count(self, corpus: str | None = None) -> int:
        return self.backend.count(corpus)

    def corpora(self) -> dict[str, int]:
        """Corpus name -> number of items."""
        return self.backend.corpora()

    def iter_items(self) -> Iterator[Item]:
        for batch in self.backend.iter_items():
            yield from batch

    def stats(self) -> dict[str, Any]:
        return {
            "target": self.backend.url,
            "items": self.count(),
            "corpora": self.corpora(),
            "embedder": self.embedder_name,
            "vector_dim": self.backend.vector_dim(),
            "items_without_vectors": len(self.backend.ids_missing_vectors(10**9))
            if self.backend.vector_dim() is not None else self.count(),
            "reembed_pending": self.backend.get_meta("pending_embedder"),
            "awaiting_embedding": self.awaiting_embedding(),
        }

    def awaiting_embedding(self) -> int:
        """How many items wait for a vector from this store's model (0 without a model)."""
        if self.embedder is None or self.backend.vector_dim() is None or not self.has_vectors:
            return 0
        return len(self.backend.ids_missing_vectors(10**9))

    # -- search -----------------------------------------------------------------------------

    def search(
        self, query: str, *, mode: str = "hybrid", limit: int = 10, offset: int = 0,
        corpora: Sequence[str] | str | None = None, filters: Filters | Mapping[str, Any] | None = None,
        fusion: str | None = None, weights: Sequence[float] | None = None,
        rrf_k: float = pipeline.fusion_lib.RRF_K, depth: int | None = None,
        dedup: float | None = pipeline.dedup.DEFAULT_THRESHOLD, dedup_cosine: float | None = None,
        score_policy: ScorePolicy | None = None, min_score: float | None = None,
        touch: bool = False, explain: bool = False,
    ) -> SearchResult:
        """Hybrid search. A query's text never raises; bad options raise InvalidInputError.

        `explain` is accepted for symmetry with the CLI: every Hit always carries its
        per-retriever ranks and scores, fusion score and boosts.
        """
        del explain
        plan = pipeline.SearchPlan(
            query=query if isinstance(query, str) else "", mode=mode, limit=limit, offset=offset,
            filters=parse_filters(dict(filters) if isinstance(filters, Mapping) else filters),
            fusion=fusion or pipeline.DEFAULT_FUSION,
            weights=tuple(weights) if weights is not None else pipeline.DEFAULT_WEIGHTS,  # type: ignore[arg-type]
            rrf_k=rrf_k, depth=depth, dedup_threshold=dedup, dedup_cosine=dedup_cosine,
            policy=score_policy or self.score_policy, min_score=min_score,
        )
        plan.validate()
        names = self._resolve_corpora(corpora)
        notes: list[str] = []
        embed = self._query_embedder(mode, notes)
        if embed is not None and self.backend.ids_missing_vectors(1):
            waiting = self.awaiting_embedding()
            notes.append(f"{waiting} item{'s' if waiting != 1 else ''} awaiting embedding: "
                         f"found by full text only until embedded (`hybridkb embed`)")
        result = pipeline.run(plan, self.backend, corpora=names, now=now_ts(), embed_query=embed,
                              labels=self._labels(), notes=notes)
        if touch and result.hits:
            self.backend.touch([h.id for h in result.hits], now_ts())
        return result

    def _resolve_corpora(self, corpora: Sequence[str] | str | None) -> list[str]:
        existing = self.corpora()
        if corpora is None:
            return sorted(existing)
        names = [corpora] if isinstance(corpora, str) else list(corpora)
        for name in names:
            _check_name("corpus", name)
        unknown = [n for n in names if n not in existing]
        if unknown and len(unknown) == len(names) and existing:
            raise NotFoundError(
                f"unknown corpus {', '.join(map(repr, unknown))}; known: {', '.join(sorted(existing))}")
        return [n for n in dict.fromkeys(names) if n in existing]

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
        return self.embedder.embed_query

    def _labels(self) -> dict[str, str]:
        raw = self.backend.get_meta("label_templates")
        return json.loads(raw) if raw else {}

    def set_label_template(self, corpus: str, template: str) -> None:
        """Label hits of `corpus` with a template like "[ticket: {title}]" (metadata keys allowed)."""
        labels = self._labels()
        if not isinstance(template, str) or len(template) > 500 or storable_text_problem(template):
            raise InvalidInputError("a label template is a string of at most 500 characters")
        try:  # fields are plain names ({title}, {id}, a metadata key); "" stands in for each
            specs = [spec for _, _, spec, _ in string.Formatter().parse(template) if spec]
            if any(re.search(r"\d{4}", spec) for spec in specs):
                raise ValueError("a format width of 1000 or more")
            template.format_map(collections.defaultdict(str))
        except (ValueError, IndexError, KeyError, AttributeError, TypeError) as exc:
            raise InvalidInputError(f"bad label template {template!r}: {exc}") from exc
        labels[_check_name("corpus", corpus)] = template
        self.backend.set_meta("label_templates", json.dumps(labels))

    def corpus_settings(self, corpus: str) -> dict[str, Any]:
        """What the store remembers about a corpus (e.g. the folder `index` mirrors into it)."""
        raw = self.backend.get_meta(CORPUS_SETTINGS + _check_name("corpus", corpus))
        value = json.loads(raw) if raw else {}
        return value if isinstance(value, dict) else {}

    def set_corpus_settings(self, corpus: str, **values: Any) -> None:
        """Merge `values` (JSON values; None removes a key) into the corpus's settings."""
        settings = self.corpus_settings(corpus)
        settings.update(values)
        settings = {k: v for k, v in settings.items() if v is not None}
        self.backend.set_meta(CORPUS_SETTINGS + corpus, json.dumps(settings, sort_keys=True))

    # -- memory -----------------------------------------------------------------------------

    def remember(
        self, text: str, *, kind: str = "memory", scope: str | None = None,
        ttl: float | timedelta | None = None, metadata: Mapping[str, Any] | None = None,
        corpus: str = MEMORY_CORPUS, **fields: Any,
    ) -> str:
        """Store a memory (a decision, lesson, note...); returns its id."""
        return self.add(text, kind=kind, scope=scope, ttl=ttl, corpus=corpus,
                        metadata=dict(metadata or {}), **fields)

    def recall(self, query: str, *, limit: int = 10, corpora: Sequence[str] | str | None = None,
               **options: Any) -> SearchResult:
        """Search memories with the score policy on, and count each returned hit as accessed."""
        if corpora is None:
            corpora = [MEMORY_CORPUS] if MEMORY_CORPUS in self.corpora() else None
        options.setdefault("touch", True)
        return self.search(query, limit=limit, corpora=corpora, **options)

    def forget(self, item_id: str) -> bool:
        return self.delete(item_id)

    # -- maintenance ------------------------------------------------------------------------

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
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        model, dim = self.embedder.model_id, self.embedder.dim
        recorded = self.backend.get_meta("embedder")
        done = 0
        if self.backend.vector_dim() not in (None, dim) or recorded not in (None, model):
            self.backend.begin_reembed(model, dim)
            after = ""
            while ids := self.backend.pending_missing_ids(after, batch_size):
                items = self.backend.get(ids, include_expired=True, now=now_ts())
                if items:
                    vectors = self.embedder.embed_documents([it.embedding_text for it in items])
                    self.backend.write_pending_vectors(
                        [it.id for it in items if it.id is not None], list(vectors),
                        [content_hash(it.embedding_text) for it in items])
                    done += len(items)
                    if progress:
                        progress(len(items))
                after = ids[-1]
            self.backend.finish_reembed(model, dim)
            self._record_model()
        elif self.backend.get_meta("pending_embedder") is not None:
            self.backend.cancel_reembed()  # an unfinished switch to a model we no longer use
        if recorded is None:
            self.backend.set_meta("embedder", model)
            self._record_model()
        self._refresh_vector_problem()
        self.backend.ensure_vector_storage(dim)
        return done + self.embed_pending(batch_size=batch_size, progress=progress)

    def embed_pending(
        self, *, batch_size: int = EMBED_BATCH, limit: int | None = None,
        progress: Progress | None = None, stop: Callable[[], bool] | None = None,
    ) -> int:
        """Give vectors to the items waiting for one (deferred writes); returns how many.

        Each batch is one transaction, so an interrupt keeps what was embedded and
        the next call continues. Batches go to the model sorted by length (little
        padding). An item rewritten or deleted meanwhile is left to its writer.
        `stop` is asked between batches (a background thread's exit signal).
        """
        if self.embedder is None or not self.has_vectors:
            return 0
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.backend.ensure_vector_storage(self.embedder.dim)
        done = 0
        skipped: set[str] = set()
        while limit is None or done < limit:
            if stop is not None and stop():
                break
            want = batch_size if limit is None else min(batch_size, limit - done)
            ids = [i for i in self.backend.ids_missing_vectors(want + len(skipped))
                   if i not in skipped][:want]
            if not ids:
                break
            items = self.backend.get(ids, include_expired=True, now=now_ts())
            vectors = self.embedder.embed_documents([it.embedding_text for it in items])
            written = self.backend.write_vectors(
                [it.id for it in items if it.id is not None], list(vectors),
                [content_hash(it.embedding_text) for it in items])
            # An item deleted or rewritten between `get` and `write_vectors` is left alone:
            # its writer embedded the new text itself (or left it in the queue again).
            if written < len(ids):
                skipped.update(ids)
            done += written
            if progress:
                progress(len(items))
        return done
