"""hybridkb: a hybrid-search knowledge store (BM25 + dense vectors, fused).

    import hybridkb
    kb = hybridkb.open("kb.db")                 # one SQLite file, default offline model
    kb.add("Use SQLite for local storage", kind="decision")
    for hit in kb.search("where do we keep data?"):
        print(hit.score, hit.source_label, hit.text)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import validation
from .embedding import Embedder, HashingEmbedder, MiniLMEmbedder, OnnxEmbedder, get_embedder
from .embedding.rerank import OnnxReranker, Reranker, get_reranker
from .errors import (
    BackendUnavailableError,
    DimensionMismatchError,
    EmbedderMismatchError,
    HybridKBError,
    InvalidFilterError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from .model import Filters, Hit, Item, RetrieverHit, SearchResult, StoredItem
from .scoring import ScorePolicy
from .store import KnowledgeBase, NewerSchemaWarning
from .version import package_version

if TYPE_CHECKING:
    from .ingest import IndexSummary, index_folder

__version__ = package_version()

__all__ = [
    "BackendUnavailableError", "DimensionMismatchError", "Embedder", "EmbedderMismatchError",
    "Filters", "HashingEmbedder", "Hit", "HybridKBError", "IndexSummary", "InvalidFilterError",
    "InvalidInputError", "Item", "KnowledgeBase", "MiniLMEmbedder", "NewerSchemaWarning", "NotFoundError",
    "OnnxEmbedder", "OnnxReranker", "Reranker", "RetrieverHit", "ScorePolicy", "SearchResult",
    "StoreError", "StoredItem", "__version__", "index_folder", "open",
]

# Face functions a user calls from Python, loaded on first use so `import hybridkb` stays light.
_LAZY = {"index_folder": "ingest", "IndexSummary": "ingest"}
_OFF = ("0", "false", "no", "off")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'hybridkb' has no attribute {name!r}")


def open(
    target: str | Path, *, embedder: Embedder | str | None = "default",
    score_policy: ScorePolicy | None = None, embed: str = "sync", sample_queries: bool | None = None,
    rerank: Reranker | str | None = None, rerank_depth: int | None = None,
    **backend_options: Any,
) -> KnowledgeBase:
    """Open (creating if needed) a store: a file path for SQLite, a postgresql:// URL (or a
    libpq "host=... dbname=..." string) for PostgreSQL. An empty target is refused.

    `embedder` is "default" (all-MiniLM-L6-v2, offline), an Embedder, a name
    ("hashing-64"), "onnx:PATH" (your own model's folder), or None for a full-text-only
    store. `rerank="onnx:PATH"` (a cross-encoder's folder, or a Reranker) reorders each
    search's first `rerank_depth` hits (30 by default; docs/models.md). `embed="sync"` (the default)
    writes each item's vector with it; `embed="defer"` commits text only and leaves
    the vectors to `kb.embed_pending()` (see `KnowledgeBase.embed_mode`). The store keeps
    the vectors (not the text) of its last 512 queries, on which its vector index measures
    its recall when built or optimized (storage/asked.py); `sample_queries=False` (or the
    environment's HYBRIDKB_SAMPLE_QUERIES=0, for the CLI and servers) keeps none.
    """
    location = validation.check_target(target)
    if sample_queries is None:
        sample_queries = os.environ.get("HYBRIDKB_SAMPLE_QUERIES", "1").strip().lower() not in _OFF
    model = get_embedder(embedder)
    reranker = get_reranker(rerank, rerank_depth)
    if validation.is_postgres_target(location):
        from .storage.postgres.backend import open_postgres

        backend: Any = open_postgres(location, **backend_options)
    else:
        from .storage.sqlite.backend import open_sqlite

        backend = open_sqlite(location, **backend_options)
    try:
        return KnowledgeBase(backend, model, score_policy=score_policy, embed=embed,
                             sample_queries=sample_queries, reranker=reranker)
    except BaseException:
        backend.close()
        raise
