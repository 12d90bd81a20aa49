"""A LlamaIndex retriever over a hybridkb store (`pip install 'hybridkb[llamaindex]'`).

    retriever = HybridKBRetriever(hybridkb.open("kb.db"), corpora=["wiki"], limit=5)
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

    Each node is a TextNode whose id is the item id; its metadata holds `source`
    (the label), `id`, `corpus`, `title`, `kind` and the item's metadata.
    """

    def __init__(self, kb: KnowledgeBase, *, corpus: str | None = None,
                 corpora: Sequence[str] | None = None, filters: Mapping[str, Any] | None = None,
                 mode: str = "hybrid", fusion: str | None = None, limit: int = 10,
                 **options: Any) -> None:
        if mode not in MODES:
            raise InvalidInputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        self.kb, self.corpus, self.mode, self.fusion, self.limit = kb, corpus, mode, fusion, limit
        self.corpora = list(corpora) if corpora is not None else None
        self.filters = dict(filters) if filters is not None else None
        super().__init__(**options)

    def _search(self, query: str) -> list[NodeWithScore]:
        result = self.kb.search(query, corpus=self.corpus, corpora=self.corpora, filters=self.filters,
                                mode=self.mode, fusion=self.fusion, limit=self.limit)
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
