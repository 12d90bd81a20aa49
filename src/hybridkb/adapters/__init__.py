"""Retrievers for the frameworks people build with, each an optional extra.

    from hybridkb.adapters.langchain import HybridKBRetriever      # pip install 'hybridkb[langchain]'
    from hybridkb.adapters.llamaindex import HybridKBRetriever     # pip install 'hybridkb[llamaindex]'

Both run `KnowledgeBase.search` and carry each hit's score, source label and id.
"""

from __future__ import annotations

from typing import Any

from ..model import Hit


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """What a framework document carries beside the text: id, score, source label, the item's fields."""
    return {
        "id": hit.id, "score": hit.score, "source": hit.source_label, "corpus": hit.corpus,
        "title": hit.title, "kind": hit.kind, "source_url": hit.source_url,
        "found_by": list(hit.found_by), "fusion_score": hit.fusion_score, "boosts": dict(hit.boosts),
        "metadata": dict(hit.metadata),
    }


def missing_extra(extra: str, package: str) -> ImportError:
    return ImportError(f"this adapter needs {package}: pip install 'hybridkb[{extra}]'")
