"""The LangChain and LlamaIndex retrievers against the real packages, on both backends."""

from __future__ import annotations

import asyncio

import pytest

from hybridkb import InvalidInputError, KnowledgeBase


def seed(kb: KnowledgeBase) -> dict[str, str]:
    return {
        "decision": kb.remember("Use SQLite for local storage", kind="decision"),
        "wiki": kb.add("Local storage lives in one SQLite file with WAL.", title="Storage",
                       kind="wiki_page", corpus="wiki", metadata={"team": "core"}),
        "code": kb.add("def open_store(path): return sqlite3.connect(path)  # local storage",
                       title="src/store.py", kind="code", corpus="code",
                       metadata={"path": "src/store.py", "start_line": 3}),
        "other": kb.add("The deploy checklist: migrations, cache, traffic.", title="Deploying",
                        kind="wiki_page", corpus="wiki"),
    }


# -- LangChain ----------------------------------------------------------------------------------

def test_langchain_retriever_sync_and_async(kb: KnowledgeBase) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from hybridkb.adapters.langchain import HybridKBRetriever

    ids = seed(kb)
    retriever = HybridKBRetriever(kb=kb, limit=3, mode="fts")
    docs = retriever.invoke("sqlite local storage")
    assert all(isinstance(d, Document) for d in docs)
    assert {d.id for d in docs} == {ids["decision"], ids["wiki"], ids["code"]}
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    by_id = {d.id: d for d in docs}
    wiki = by_id[ids["wiki"]]
    assert wiki.page_content == "Local storage lives in one SQLite file with WAL."
    assert wiki.metadata["source"] == "[wiki: Storage]" and wiki.metadata["id"] == ids["wiki"]
    assert wiki.metadata["metadata"] == {"team": "core"} and wiki.metadata["found_by"] == ["fts"]

    async_docs = asyncio.run(retriever.ainvoke("sqlite local storage"))
    assert [d.id for d in async_docs] == [d.id for d in docs]


def test_langchain_retriever_fields_filter(kb: KnowledgeBase) -> None:
    pytest.importorskip("langchain_core")
    from hybridkb.adapters.langchain import HybridKBRetriever

    ids = seed(kb)
    assert [d.id for d in HybridKBRetriever(kb=kb, corpus="code").invoke("storage")] == [ids["code"]]
    wiki = HybridKBRetriever(kb=kb, corpora=["wiki"], filters={"metadata": {"team": "core"}})
    assert [d.id for d in wiki.invoke("storage")] == [ids["wiki"]]
    kinds = HybridKBRetriever(kb=kb, filters={"kind": "decision"}, mode="fts")
    assert [d.id for d in kinds.invoke("storage")] == [ids["decision"]]
    assert len(HybridKBRetriever(kb=kb, limit=1).invoke("storage")) == 1
    with pytest.raises(InvalidInputError, match="not both"):
        HybridKBRetriever(kb=kb, corpus="wiki", corpora=["code"]).invoke("storage")
    with pytest.raises(ValueError):  # pydantic checks the mode field
        HybridKBRetriever(kb=kb, mode="psychic")  # type: ignore[arg-type]


# -- LlamaIndex ---------------------------------------------------------------------------------

def test_llamaindex_retriever_sync_and_async(kb: KnowledgeBase) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

    from hybridkb.adapters.llamaindex import HybridKBRetriever

    ids = seed(kb)
    retriever = HybridKBRetriever(kb, limit=3, mode="fts")
    nodes = retriever.retrieve("sqlite local storage")
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    assert {n.node.node_id for n in nodes} == {ids["decision"], ids["wiki"], ids["code"]}
    scores = [n.score for n in nodes]
    assert all(s is not None and s > 0 for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    code = next(n for n in nodes if n.node.node_id == ids["code"])
    assert code.node.get_content() == "def open_store(path): return sqlite3.connect(path)  # local storage"
    assert code.node.metadata["source"] == "[code: src/store.py]"
    assert code.node.metadata["metadata"]["start_line"] == 3
    shown = code.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "[code: src/store.py]" in shown and "fusion_score" not in shown

    async_nodes = asyncio.run(retriever.aretrieve("sqlite local storage"))
    assert [n.node.node_id for n in async_nodes] == [n.node.node_id for n in nodes]


def test_llamaindex_retriever_options(kb: KnowledgeBase) -> None:
    pytest.importorskip("llama_index.core")
    from hybridkb.adapters.llamaindex import HybridKBRetriever

    ids = seed(kb)
    assert [n.node.node_id for n in HybridKBRetriever(kb, corpus="code").retrieve("storage")] == [ids["code"]]
    wiki = HybridKBRetriever(kb, corpora=["wiki"], filters={"kind": "wiki_page"}, mode="fts")
    assert [n.node.node_id for n in wiki.retrieve("deploy")] == [ids["other"]]
    with pytest.raises(InvalidInputError, match="unknown mode"):
        HybridKBRetriever(kb, mode="psychic")


def test_langchain_retriever_takes_k_as_langchain_does(kb: KnowledgeBase) -> None:
    pytest.importorskip("langchain_core")
    from hybridkb.adapters.langchain import HybridKBRetriever

    seed(kb)
    retriever = HybridKBRetriever(kb=kb, k=3, mode="fts")
    assert retriever.k == retriever.limit == 3
    assert len(retriever.invoke("sqlite local storage")) == 3
    assert len(retriever.invoke("sqlite local storage", k=1)) == 1  # this call only
    assert len(asyncio.run(retriever.ainvoke("sqlite local storage", k=2))) == 2
    assert len(retriever.invoke("sqlite local storage")) == 3
    assert HybridKBRetriever(kb=kb, limit=2).k == 2  # the old name still works


def test_llamaindex_retriever_takes_similarity_top_k(kb: KnowledgeBase) -> None:
    pytest.importorskip("llama_index.core")
    from hybridkb.adapters.llamaindex import HybridKBRetriever

    seed(kb)
    retriever = HybridKBRetriever(kb, similarity_top_k=2, mode="fts")
    assert retriever.similarity_top_k == retriever.limit == 2
    assert len(retriever.retrieve("sqlite local storage")) == 2
    assert len(HybridKBRetriever(kb, limit=1, mode="fts").retrieve("sqlite local storage")) == 1
    assert HybridKBRetriever(kb).similarity_top_k == 10
    with pytest.raises(InvalidInputError, match="not both"):
        HybridKBRetriever(kb, similarity_top_k=2, limit=3)
