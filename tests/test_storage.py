"""The storage contract on both dialects: SearchArea's corpora, the shared records, StoredItem."""

from __future__ import annotations

import time

import pytest
from named import named

from hybridkb import Filters, Item, KnowledgeBase
from hybridkb.model import StoredItem
from hybridkb.storage import records
from hybridkb.storage.contract import SearchArea
from hybridkb.textquery import parse as parse_query

DOCS = {
    "a": [("a1", "the river stone ledger"), ("a2", "river deploy kernel")],
    "b": [("b1", "river market cache"), ("b2", "stone thread socket")],
    "c": [("c1", "river river billing"), ("c2", "cloud omega")],
}


def _fill(kb: KnowledgeBase) -> None:
    for corpus, docs in DOCS.items():
        kb.add_many([{"id": i, "text": t, "corpus": corpus, "kind": "note" if i.endswith("1") else "log"}
                     for i, t in docs])


def _area(corpora: tuple[str, ...] | None, **filters: object) -> SearchArea:
    return SearchArea(corpora=corpora, filters=Filters(**filters), now=time.time())  # type: ignore[arg-type]


@pytest.mark.parametrize(("corpora", "expected"), [
    (("a",), {"a1", "a2"}),
    (("a", "c"), {"a1", "a2", "c1"}),
    (("b", "nowhere"), {"b1"}),
    (None, {"a1", "a2", "b1", "c1"}),
])
def test_retrievals_look_only_in_the_area(kb: KnowledgeBase, corpora: tuple[str, ...] | None,
                                          expected: set[str]) -> None:
    _fill(kb)
    backend = kb.backend
    area = _area(corpora)
    text = named(backend, backend.text_search(parse_query("river"), area, 50))
    assert {i for i, _ in text} == expected
    assert all(s > 0 for _, s in text)
    substring = named(backend, backend.substring_search(["river"], area, 50))
    assert {i for i, _ in substring} == expected
    query = kb.embedder.embed_query("river") if kb.embedder else None
    assert query is not None
    vector_ids = {i for i, _ in named(backend, backend.vector_search(query, area, 50))}
    in_area = {i for c, docs in DOCS.items() if corpora is None or c in corpora for i, _ in docs}
    assert vector_ids == in_area  # every item has a vector; KNN ranks all of them


def test_area_combines_with_filters(kb: KnowledgeBase) -> None:
    _fill(kb)
    area = _area(("a", "b", "c"), kinds=("note",))
    assert {i for i, _ in named(kb.backend, kb.backend.text_search(parse_query("river"), area, 50))} == {
        "a1", "b1", "c1"}
    assert {i for i, _ in named(kb.backend, kb.backend.substring_search(["stone"], area, 50))} == {"a1"}


def test_one_corpus_area_ranks_as_before(kb: KnowledgeBase) -> None:
    """A one-corpus tuple is the old per-corpus retrieval: scores equal those of kb.search."""
    _fill(kb)
    hits = named(kb.backend, kb.backend.text_search(parse_query("river"), _area(("c",)), 10))
    result = kb.search("river", corpora=["c"], mode="fts")
    assert [i for i, _ in hits] == result.ids == ["c1"]
    assert result.hits[0].retrievers["fts"].score == pytest.approx(hits[0][1])


def test_empty_area_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        SearchArea(corpora=(), filters=Filters(), now=0.0)


def test_stored_items_have_ids_and_compare_with_items(kb: KnowledgeBase) -> None:
    kb.add("hello there", id="h1", corpus="x", metadata={"k": [1, True]})
    got = kb.get("h1")
    assert isinstance(got, StoredItem) and got.id == "h1"
    assert got.metadata == {"k": [1, True]} and got.stale is False
    same = Item(**{**got.to_dict()})
    assert got == same and same == got
    assert got != Item(**{**got.to_dict(), "text": "changed"})
    assert [it.id for it in kb.iter_items()] == ["h1"]


def test_meta_keys_are_what_the_store_records(kb: KnowledgeBase) -> None:
    assert kb.embedder is not None
    assert kb.backend.get_meta(records.META_EMBEDDER) == kb.embedder.model_id
    assert kb.backend.get_meta(records.META_VECTOR_DIM) == str(kb.embedder.dim)
    assert kb.backend.get_meta(records.META_EMBEDDER_NAME) == kb.embedder.name
    assert kb.backend.get_meta(records.META_PENDING_EMBEDDER) is None


def test_replace_keeps_created_at_and_use_counts(kb: KnowledgeBase) -> None:
    kb.add("first text", id="r")
    before = kb.get("r")
    kb.backend.touch(["r"], time.time())
    kb.upsert("second text", id="r", title="new")
    after = kb.get("r")
    assert after.text == "second text" and after.title == "new"
    assert after.created_at == before.created_at and after.access_count == 1
    assert kb.backend.integrity_problems() == []


def test_conflict_rule_names_every_replaced_column() -> None:
    rule = records.ON_CONFLICT_REPLACE
    for column in ("corpus", "title", "text", "kind", "scope", "repo", "namespace", "source_url",
                   "metadata", "updated_at", "expires_at", "stale", "content_hash", "embedded_hash"):
        assert f" {column} = " in rule
    for kept in ("created_at", "access_count", "last_accessed_at"):
        assert f" {kept} = " not in rule
