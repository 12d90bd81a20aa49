"""A LangChain retriever over a hybridkb store (`pip install 'hybridkb[langchain]'`).

    retriever = HybridKBRetriever(kb=hybridkb.open("kb.db"), corpora=["wiki"], k=5)
    docs = retriever.invoke("where do we keep data?")        # or await retriever.ainvoke(...)
    retriever.invoke("where do we keep data?", k=1)          # one document this time
    docs[0].metadata["score"], docs[0].metadata["source"], docs[0].id
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import AliasChoices, ConfigDict, Field
except ImportError as exc:  # pragma: no cover - depends on the environment
    from . import missing_extra

    raise missing_extra("langchain", "langchain-core") from exc

from ..store import KnowledgeBase
from . import hit_metadata

__all__ = ["HybridKBRetriever"]


class HybridKBRetriever(BaseRetriever):
    """Hybrid (BM25 + vector) search as a LangChain retriever; each hit becomes a Document.

    `corpus` (one) or `corpora` (several), `filters` as in `KnowledgeBase.search`
    (kind, scope, repo, namespace, metadata, time ranges), `mode`, `fusion` and `k` (how
    many documents; `limit=` is accepted for it too) are fields, and `invoke(query, k=n)`
    asks for n this once, as LangChain's retrievers take it. The Document's `id` is the item
    id and its metadata holds `score`, `source` (the label), `id`, `corpus`, `title`, `kind`
    and the item's metadata.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True)

    kb: KnowledgeBase
    corpus: str | None = None
    corpora: list[str] | None = None
    filters: dict[str, Any] | None = None
    mode: Literal["hybrid", "fts", "vector"] = "hybrid"
    fusion: str | None = None
    k: int = Field(default=10, validation_alias=AliasChoices("k", "limit"))

    @property
    def limit(self) -> int:
        """`k`, by the name this retriever first gave it."""
        return self.k

    def _search(self, query: str, k: int | None) -> list[Document]:
        result = self.kb.search(query, corpus=self.corpus, corpora=self.corpora, filters=self.filters,
                                mode=self.mode, fusion=self.fusion, limit=self.k if k is None else k)
        return [Document(page_content=hit.text, metadata=hit_metadata(hit), id=hit.id)
                for hit in result.hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        return self._search(query, k)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None) -> list[Document]:
        # The store is synchronous: search in a worker thread so the event loop keeps running.
        return await asyncio.to_thread(self._search, query, k)
