"""KnowledgeBase: the one entry class every face (API, CLI, MCP) goes through."""

from __future__ import annotations

import json
import math
import re
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
from .model import ITEM_FIELDS, Filters, Item, SearchResult, now_ts, parse_filters, to_ts
from .scoring import ScorePolicy

MAX_TEXT_CHARS = 1_000_000
MAX_ID_CHARS = 512
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")
MEMORY_CORPUS = "memory"

Progress = Callable[[int], None]


def _check_name(kind: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.match(value) or not value.strip():
        raise InvalidInputError(
            f"{kind} must be a non-empty string of at most 128 printable characters: {value!r}")
    return value


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
                 score_policy: ScorePolicy | None = None) -> None:
        self.backend = backend
        self.embedder = embedder
        self.score_policy = score_policy or ScorePolicy()
        self._vector_problem: EmbedderMismatchError | None = None
        self._check_embedder()

    # -- lifecycle --------------------------------------------------------------------------

    def _check_embedder(self) -> None:
        recorded = self.backend.get_meta("embedder")
        if self.embedder is None:
            return
        current = self.embedder.model_id
        if recorded is None:
            self.backend.ensure_vector_storage(self.embedder.dim)
            self.backend.set_meta("embedder", current)
        elif recorded != current:
            self._vector_problem = EmbedderMismatchError(
                f"this store was embedded with {recorded!r} but is opened with {current!r}; "
                f"open it with the same model, or run `hybridkb reembed` to switch it to "
                f"{current!r} (full-text search keeps working meanwhile)")

    @property
    def embedder_name(self) -> str | None:
        return self.backend.get_meta("embedder")

    @property
    def has_vectors(self) -> bool:
        return self.embedder is not None and self._vector_problem is None

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------

    def add(self, text: str, **fields: Any) -> str:
        """Add one item; returns its id. An existing id is an error (use `upsert`)."""
        return self.add_many([{"text": text, **fields}])[0]

    def upsert(self, text: str, **fields: Any) -> str:
        """Insert or replace one item by id (created_at and access counts are kept)."""
        return self.add_many([{"text": text, **fields}], replace=True)[0]

    def add_many(
        self, items: Iterable[Item | Mapping[str, Any]], *, replace: bool = False,
        batch_size: int = 256, progress: Progress | None = None,
    ) -> list[str]:
        """Add items in batches; each batch is one transaction (all of it or none).

        Vectors are computed for new or changed text only (by content hash).
        """
        ids: list[str] = []
        batch: list[tuple[Item, Vector | None]] = []
        for raw in items:
            batch.append(self._prepare(raw))
            if len(batch) >= batch_size:
                ids.extend(self._write_batch(batch, replace))
                if progress:
                    progress(len(batch))
                batch = []
        if batch:
            ids.extend(self._write_batch(batch, replace))
            if progress:
                progress(len(batch))
        return ids

    def upsert_many(self, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> list[str]:
        return self.add_many(items, replace=True, **options)

    def _prepare(self, raw: Item | Mapping[str, Any]) -> tuple[Item, Vector | None]:
        now = now_ts()
        if isinstance(raw, Item):
            item, vector, ttl = dc_replace(raw, metadata=dict(raw.metadata)), None, None
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
                        raise InvalidInputError(f"{key}: {exc}") from exc
            if "text" not in data:
                raise InvalidInputError("an item needs a text")
            item = Item(**data)
        else:
            raise InvalidInputError(f"an item is an Item or a dict, not {type(raw).__name__}")
        label = item.id if item.id is not None else item.text[:40] if isinstance(item.text, str) else "?"
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
        vec = None
        if vector is not None:
            vec = self._check_vector(vector, item.id)
        return item, vec

    def _validate(self, item: Item) -> None:
        if not isinstance(item.text, str) or not item.text.strip():
            raise InvalidInputError("text must be a non-empty string")
        if len(item.text) > MAX_TEXT_CHARS:
            raise InvalidInputError(f"text has {len(item.text)} characters; the limit is {MAX_TEXT_CHARS}")
        try:
            item.text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"text is not valid Unicode: {exc}") from exc
        if item.id is not None and (not isinstance(item.id, str) or not item.id
                                    or len(item.id) > MAX_ID_CHARS):
            raise InvalidInputError(f"id must be a non-empty string of at most {MAX_ID_CHARS} characters")
        _check_name("corpus", item.corpus)
        for name in ("title", "kind", "scope", "repo", "namespace", "source_url"):
            value = getattr(item, name)
            if value is not None and not isinstance(value, str):
                raise InvalidInputError(f"{name} must be a string")
        if not isinstance(item.metadata, dict):
            raise InvalidInputError("metadata must be a JSON object")
        try:
            json.dumps(item.metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"metadata is not JSON-serializable: {exc}") from exc
        for name in ("created_at", "updated_at", "expires_at", "last_accessed_at"):
            value = getattr(item, name)
            if value is not None and (not isinstance(value, int | float) or not math.isfinite(value)):
                raise InvalidInputError(f"{name} must be a finite timestamp")
        if not isinstance(item.access_count, int) or item.access_count < 0:
            raise InvalidInputError("access_count must be an integer >= 0")

    def _check_vector(self, vector: Any, item_id: str | None) -> Vector:
        try:
            vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"item {item_id!r}: vector is not a list of numbers") from exc
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

    def _write_batch(self, batch: list[tuple[Item, Vector | None]], replace: bool) -> list[str]:
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
            if self._vector_problem is not None:
                raise self._vector_problem
            unchanged = self.backend.embedded_hashes([it.id for it in items]) if replace else {}  # type: ignore[misc]
            todo = [i for i, it in enumerate(items)
                    if vectors[i] is None and unchanged.get(it.id) != hashes[i]]  # type: ignore[arg-type]
            if todo:
                embedded = self.embedder.embed_documents([items[i].embedding_text for i in todo])
                for i, vec in zip(todo, embedded, strict=True):
                    vectors[i] = vec
        self.backend.upsert(items, vectors, hashes, replace=replace)
        return [it.id for it in items]  # type: ignore[misc]

    def delete(self, item_id: str) -> bool:
        """Delete one item; False when it did not exist."""
        return self.backend.delete([item_id]) > 0

    def delete_many(self, ids: Sequence[str]) -> int:
        return self.backend.delete(list(ids))

    def purge_expired(self) -> int:
        """Delete every expired item; returns how many."""
        return self.backend.purge_expired(now_ts())

    # -- reads ------------------------------------------------------------------------------

    def get(self, item_id: str, *, include_expired: bool = False) -> Item:
        found = self.backend.get([item_id], include_expired=include_expired, now=now_ts())
        if not found:
            raise NotFoundError(f"no item with id {item_id!r}")
        return found[0]

    def get_many(self, ids: Sequence[str], *, include_expired: bool = False) -> list[Item]:
        """The items that exist, in the order asked; missing ids are skipped."""
        return self.backend.get(list(ids), include_expired=include_expired, now=now_ts())

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
        }

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
        labels[_check_name("corpus", corpus)] = template
        self.backend.set_meta("label_templates", json.dumps(labels))

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
        """Embed every item whose vector is missing or out of date; resumable.

        Switching to another model first drops the old vectors (the store then
        records the new model), so a crash midway leaves a store that resumes.
        """
        if self.embedder is None:
            raise InvalidInputError("reembed needs an embedder")
        if (self.backend.get_meta("embedder") != self.embedder.model_id
                or self.backend.vector_dim() not in (None, self.embedder.dim)):
            self.backend.clear_vectors()
            self.backend.set_meta("embedder", self.embedder.model_id)
            self._vector_problem = None
        self.backend.ensure_vector_storage(self.embedder.dim)
        done = 0
        while ids := self.backend.ids_missing_vectors(batch_size):
            items = self.backend.get(ids, include_expired=True, now=now_ts())
            vectors = self.embedder.embed_documents([it.embedding_text for it in items])
            self.backend.upsert(items, list(vectors),
                                [content_hash(it.embedding_text) for it in items], replace=True)
            done += len(items)
            if progress:
                progress(len(items))
        return done
