"""One corpus is `corpus=`, several are `corpora=`; iter_items filters; the public names; one version."""

from __future__ import annotations

import time
from importlib.metadata import version
from pathlib import Path

import pytest

import hybridkb
from hybridkb import InvalidInputError, KnowledgeBase
from hybridkb.model import Filters, Item
from hybridkb.selection import item_matches


def seed(kb: KnowledgeBase) -> None:
    kb.add("deploy with blue green switch", id="a1", corpus="a", kind="decision",
           metadata={"team": "ops", "n": 1})
    kb.add("deploy runbook for the database", id="b1", corpus="b", kind="wiki_page",
           metadata={"team": "db", "flag": True})
    kb.add("deploy notes that went stale", id="b2", corpus="b", kind="wiki_page", stale=True)
    kb.remember("deploy on tuesdays only", id="m1", kind="lesson", ttl=0.5)


def test_search_and_recall_take_corpus_or_corpora(kb: KnowledgeBase) -> None:
    seed(kb)
    one = kb.search("deploy", corpus="a", mode="fts")
    assert one.ids == ["a1"]
    assert kb.search("deploy", corpora=["a"], mode="fts").ids == one.ids
    assert set(kb.search("deploy", corpora=["a", "b"], mode="fts").ids) == {"a1", "b1"}
    assert kb.recall("deploy", corpus="memory", mode="fts").ids == ["m1"]
    with pytest.raises(InvalidInputError, match=r"either corpus= .* or corpora="):
        kb.search("deploy", corpus="a", corpora=["b"])
    with pytest.raises(InvalidInputError, match="either corpus="):
        kb.recall("deploy", corpus="a", corpora=["b"])
    with pytest.raises(InvalidInputError, match="corpus= takes one name"):
        kb.search("deploy", corpus=["a", "b"])  # type: ignore[arg-type]


def test_iter_items_filters(kb: KnowledgeBase) -> None:
    seed(kb)
    assert sorted(i.id for i in kb.iter_items()) == ["a1", "b1", "b2", "m1"]  # everything
    assert sorted(i.id for i in kb.iter_items(corpus="b")) == ["b1", "b2"]
    assert sorted(i.id for i in kb.iter_items(corpora=["a", "memory"])) == ["a1", "m1"]
    # filters work as in search: stale items left out unless asked for
    assert [i.id for i in kb.iter_items(filters={"kind": "wiki_page"})] == ["b1"]
    assert sorted(i.id for i in kb.iter_items(corpus="b", filters={"include_stale": True})) == ["b1", "b2"]
    assert [i.id for i in kb.iter_items(filters={"metadata": {"team": "ops"}})] == ["a1"]
    assert [i.id for i in kb.iter_items(filters={"metadata": {"team": ["db", "x"]}})] == ["b1"]
    assert [i.id for i in kb.iter_items(filters={"kind": ["decision", "lesson"]}, corpus="memory")] == ["m1"]
    time.sleep(0.6)  # m1 expires
    assert [i.id for i in kb.iter_items(filters={"kind": "lesson"})] == []
    assert [i.id for i in kb.iter_items(filters={"kind": "lesson", "include_expired": True})] == ["m1"]
    with pytest.raises(InvalidInputError, match="unknown filter field 'colour'"):
        list(kb.iter_items(filters={"colour": "red"}))
    with pytest.raises(InvalidInputError, match="not both"):
        list(kb.iter_items(corpus="a", corpora=["b"]))


def test_iter_items_agrees_with_search_filters(kb: KnowledgeBase) -> None:
    """The Python filter answers what the backend's filter SQL answers."""
    seed(kb)
    for filters in ({"metadata": {"team": "ops"}}, {"metadata": {"n": 1}}, {"metadata": {"flag": True}},
                    {"kind": "wiki_page", "include_stale": True}, {"created_after": "2000-01-01"},
                    {"created_before": "2000-01-01"}):
        walked = sorted(i.id for i in kb.iter_items(filters=filters))
        found = sorted(kb.search("deploy", mode="fts", filters=filters, limit=50).ids)
        assert walked == found, filters


def test_metadata_filters_compare_values_not_containment(kb: KnowledgeBase) -> None:
    """A metadata filter matches a value equal to one it names (2 equals 2.0; true and 1
    match each other as in SQLite's JSON), never a list or object that merely holds it
    (PostgreSQL finds the rows through containment, which would)."""
    kb.add("deploy one", id="x1", metadata={"tags": ["a", "b"], "n": 2.0, "o": {"k": "a"}})
    kb.add("deploy two", id="x2", metadata={"tags": "a", "n": 2, "o": "a"})
    kb.add("deploy three", id="x3", metadata={"tags": "b", "n": True})
    for filters, expected in (({"tags": "a"}, ["x2"]), ({"tags": ["a", "b"]}, ["x2", "x3"]),
                              ({"n": 2}, ["x1", "x2"]), ({"n": 2.0}, ["x1", "x2"]),
                              ({"n": 1}, ["x3"]), ({"n": True}, ["x3"]), ({"o": "a"}, ["x2"]),
                              ({"k": "a"}, [])):
        found = kb.search("deploy", mode="fts", filters={"metadata": filters}, limit=10)
        assert sorted(found.ids) == expected, filters


def test_item_matches_times_and_types() -> None:
    item = Item("x", id="i", created_at=100.0, updated_at=200.0, metadata={"n": 1, "l": ["a"], "b": True})
    assert item_matches(item, Filters(created_after=100.0, created_before=101.0), now=0)
    assert not item_matches(item, Filters(created_before=100.0), now=0)
    assert not item_matches(item, Filters(updated_after=200.5), now=0)
    assert not item_matches(item, Filters(metadata=(("l", ("a",)),)), now=0)  # lists never equal
    assert not item_matches(item, Filters(metadata=(("n", (True,)),)), now=0)
    assert item_matches(item, Filters(metadata=(("b", (True,)),)), now=0)
    assert not item_matches(item, Filters(metadata=(("missing", ("a",)),)), now=0)


def test_public_names_and_one_version(tmp_path: Path) -> None:
    assert hybridkb.__version__ == version("hybridkb")
    for name in hybridkb.__all__:
        assert getattr(hybridkb, name) is not None, name
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\nSome indexed words about deploys.\n")
    with hybridkb.open(tmp_path / "kb.db", embedder=None) as kb:
        summary = hybridkb.index_folder(kb, tmp_path / "docs", "docs")
        assert isinstance(summary, hybridkb.IndexSummary) and summary.files_changed == 1
        assert kb.search("deploys", corpus="docs").hits[0].metadata["path"] == "a.md"
        assert kb.stats()["version"] == hybridkb.__version__


def test_mcp_server_info_reports_the_version(tmp_path: Path) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    import anyio
    from mcp import Client

    from hybridkb.mcp import build_server

    async def info() -> str:
        with hybridkb.open(tmp_path / "kb.db", embedder=None) as kb:
            async with Client(build_server(kb), mode="legacy") as client:  # the initialize handshake
                assert client.server_info is not None and client.server_info.name == "hybridkb"
                return str(client.server_info.version)

    assert anyio.run(info) == hybridkb.__version__
