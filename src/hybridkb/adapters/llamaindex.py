"""A LlamaIndex retriever over a hybridkb store (`pip install 'hybridkb[llamaindex]'`).

    retriever = HybridKBRetriever(hybridkb.open("kb.db"), corpora=["wiki"], similarity_top_k=5)
    nodes = retriever.retrieve("where do we keep data?")     # or await retriever.aretrieve(...)
    nodes[0].score, nodes[0].node.node_id, nodes[0].node.metadata["source"]
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - depends on the environment
    from . import missing_extra

    raise missing_extra("llamaindex", "llama-index-core") from exc

from ..errors import InvalidInputError
from ..model import MODES
from ..store import KnowledgeBase
from . import hit_metadata

__all__ = ["HybridKBRetriever"]

# Fields kept out of what LlamaIndex shows the LLM and the embedder (they describe the ranking).
_RANKING_KEYS = ["score", "found_by", "fusion_score", "boosts", "metadata"]


class HybridKBRetriever(BaseRetriever):
    """Hybrid (BM25 + vector) search as a LlamaIndex retriever returning NodeWithScore.

    `similarity_top_k` is how many nodes come back (LlamaIndex's name; `limit=` is accepted
    for it too). Each node is a TextNode whose id is the item id; its metadata holds
    `source` (the label), `id`, `corpus`, `title`, `kind` and the item's metadata.
    """

    def __init__(self, kb: KnowledgeBase, *, corpus: str | None = None,
                 corpora: Sequence[str] | None = None, filters: Mapping[str, Any] | None = None,
                 mode: str = "hybrid", fusion: str | None = None, similarity_top_k: int | None = None,
                 limit: int | None = None, **options: Any) -> None:
        if mode not in MODES:
            raise InvalidInputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if similarity_top_k is not None and limit is not None and similarity_top_k != limit:
            raise InvalidInputError("give similarity_top_k or limit (the same setting), not both")
        top_k = similarity_top_k if similarity_top_k is not None else limit
        self.kb, self.corpus, self.mode, self.fusion = kb, corpus, mode, fusion
        self.similarity_top_k = 10 if top_k is None else top_k
        self.corpora = list(corpora) if corpora is not None else None
        self.filters = dict(filters) if filters is not None else None
        super().__init__(**options)

    @property
    def limit(self) -> int:
        """`similarity_top_k`, by the name this retriever first gave it."""
        return self.similarity_top_k

    def _search(self, query: str) -> list[NodeWithScore]:
        result = self.kb.search(query, corpus=self.corpus, corpora=self.corpora, filters=self.filters,
                                mode=self.mode, fusion=self.fusion, limit=self.similarity_top_k)
        nodes = []
        for hit in result.hits:
            node = TextNode(id_=hit.id, text=hit.text, metadata=hit_metadata(hit),
                            excluded_llm_metadata_keys=list(_RANKING_KEYS),
                            excluded_embed_metadata_keys=list(_RANKING_KEYS))
            nodes.append(NodeWithScore(node=node, score=hit.score))
        return nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._search(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # The store is synchronous: search in a worker thread so the event loop keeps running.
        return await asyncio.to_thread(self._search, query_bundle.query_str)
