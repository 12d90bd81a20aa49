"""LangChain's own standard retriever tests (`langchain-tests`) run against HybridKBRetriever:
the `k` constructor field, `invoke(query, k=n)`, Documents from invoke and ainvoke."""

from __future__ import annotations

from typing import Any

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

pytest.importorskip("langchain_core")
standard = pytest.importorskip("langchain_tests.integration_tests")

from hybridkb.adapters.langchain import HybridKBRetriever  # noqa: E402

# The suite's async test runs under anyio's plugin (the suite leaves the runner to its user;
# its own rules forbid overriding a test to mark it).
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

NOTES = [
    "Use SQLite for local storage: one file, WAL mode.",
    "Local storage lives in SQLite; PostgreSQL is for teams that outgrow one file.",
    "Rebuild the full-text index after bulk imports into local storage.",
    "The deploy checklist: run migrations, warm the cache, then switch traffic.",
    "Back up the SQLite storage file before a migration.",
]
_store: KnowledgeBase | None = None


def store() -> KnowledgeBase:
    """One in-memory store for the class (the suite builds retrievers from plain properties)."""
    global _store
    if _store is None:
        _store = hybridkb.open(":memory:", embedder=HashingEmbedder(64))
        _store.add_many([{"text": t, "corpus": "notes"} for t in NOTES])
    return _store


class TestHybridKBRetrieverStandard(standard.RetrieversIntegrationTests):  # type: ignore[misc, name-defined]
    @property
    def retriever_constructor(self) -> type[HybridKBRetriever]:
        return HybridKBRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"kb": store(), "corpus": "notes"}

    @property
    def retriever_query_example(self) -> str:
        return "sqlite local storage"
