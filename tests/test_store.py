"""KnowledgeBase behaviour on real stores (every backend in conftest.BACKENDS)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from named import named

import hybridkb
from hybridkb import (
    DimensionMismatchError,
    EmbedderMismatchError,
    HashingEmbedder,
    InvalidFilterError,
    InvalidInputError,
    Item,
    KnowledgeBase,
    NotFoundError,
)

NOTES = [
    ("m1", "Run migration_032 before deploying the billing service", "decision"),
    ("m2", "We keep all data in a single SQLite file on local disk", "decision"),
    ("m3", "kubectl apply -f deploy.yaml rolls out the new pods", "lesson"),
    ("m4", "The cat sat on the mat and looked at the garden", "memory"),
    ("m5", "Billing invoices are generated on the first day of each month", "summary"),
]


@pytest.fixture
def filled(kb: KnowledgeBase) -> KnowledgeBase:
    for item_id, text, kind in NOTES:
        kb.add(text, id=item_id, kind=kind, metadata={"team": "core" if item_id < "m3" else "ops"})
    return kb


def test_add_get_count_delete(kb: KnowledgeBase) -> None:
    new_id = kb.add("hello world", title="Greeting", kind="memory", metadata={"a": 1})
    item = kb.get(new_id)
    assert (item.text, item.title, item.kind, item.metadata) == ("hello world", "Greeting", "memory", {"a": 1})
    assert item.created_at is not None and abs(item.created_at - time.time()) < 60
    assert kb.count() == 1 and kb.count("default") == 1 and kb.count("other") == 0
    assert kb.delete(new_id) is True
    assert kb.delete(new_id) is False
    with pytest.raises(NotFoundError):
        kb.get(new_id)
    assert kb.count() == 0


def test_a_list_where_one_id_belongs_is_refused_not_ignored(kb: KnowledgeBase) -> None:
    """kb.delete(["a", "b"]) used to delete nothing and answer False."""
    kb.add("first", id="a")
    kb.add("second", id="b")
    for call in (lambda: kb.delete(["a", "b"]),  # type: ignore[arg-type]
                 lambda: kb.get(["a"]),  # type: ignore[arg-type]
                 lambda: kb.delete_many([["a"], "b"]),  # type: ignore[list-item]
                 lambda: kb.get_many([1, "a"]),  # type: ignore[list-item]
                 lambda: kb.delete_many("ab")):
        with pytest.raises(InvalidInputError, match="string"):
            call()
    assert kb.count() == 2 and kb.delete_many(["a", "b", "missing"]) == 2


def test_add_existing_id_is_error_upsert_replaces(kb: KnowledgeBase) -> None:
    kb.add("first version", id="x")
    with pytest.raises(InvalidInputError, match="already exists"):
        kb.add("second", id="x")
    created = kb.get("x").created_at
    kb.upsert("second version", id="x")
    item = kb.get("x")
    assert item.text == "second version" and item.created_at == created
    assert kb.count() == 1
    assert kb.search("second", mode="fts").ids == ["x"]
    assert kb.search("first", mode="fts").ids == []


def test_search_finds_exact_identifier_by_fts(filled: KnowledgeBase) -> None:
    result = filled.search("migration_032", mode="fts")
    assert result.ids == ["m1"]
    assert result.answered_by == "fts"
    hybrid = filled.search("migration_032")
    assert hybrid.hits[0].id == "m1"
    assert set(hybrid.hits[0].found_by) == {"fts", "vector"}
    assert hybrid.answered_by == "hybrid"


def test_hit_carries_explanation(filled: KnowledgeBase) -> None:
    hit = filled.search("kubectl apply", score_policy=hybridkb.ScorePolicy.off()).hits[0]
    assert hit.id == "m3"
    assert hit.retrievers["fts"].rank == 1
    assert hit.score == pytest.approx(hit.relevance)  # no policy: the score is the relevance
    assert 0.0 < hit.score <= 1.0 and hit.fusion_score > 0
    explained = hit.to_dict(explain=True)["explanation"]
    assert explained["relevance"] == hit.relevance
    assert explained["retrievers"]["fts"]["rank"] == 1
    assert explained["final_score"] == hit.score


def test_limit_and_offset_pages_never_repeat(filled: KnowledgeBase) -> None:
    everything = filled.search("the billing data", limit=5, mode="vector").ids
    assert len(everything) == 5
    pages = [filled.search("the billing data", limit=2, offset=o, mode="vector").ids for o in (0, 2, 4)]
    assert [i for page in pages for i in page] == everything


@pytest.mark.parametrize("query", ["", "   ", '"', "NEAR(", "-x", "a:b", "C++", "🎉", "日本語",
                                   "x" * 100_000, "'; DROP TABLE items; --", "\x00\x01\x02"])
def test_hostile_queries_return_cleanly(filled: KnowledgeBase, query: str) -> None:
    known = {it.id for it in filled.iter_items()}
    for mode in ("hybrid", "fts", "vector"):
        result = filled.search(query, mode=mode)
        assert result.mode == mode and result.query == query
        assert set(result.ids) <= known and len(result.hits) <= 10
        assert result.answered_by in ("hybrid", "fts", "vector", "substring", "none")
        if not query.strip():
            assert result.hits == [] and result.answered_by == "none"
    assert filled.count() == len(NOTES)


def test_empty_query_answers_nothing(filled: KnowledgeBase) -> None:
    assert filled.search("").answered_by == "none"


def test_fts_only_store_degrades_visibly(fts_kb: KnowledgeBase) -> None:
    fts_kb.add("Run migration_032 first", id="a")
    result = fts_kb.search("migration_032")
    assert result.ids == ["a"] and result.answered_by == "fts"
    assert any("full-text" in n for n in result.notes)
    with pytest.raises(EmbedderMismatchError):
        fts_kb.search("x", mode="vector")


def test_substring_fallback(fts_kb: KnowledgeBase) -> None:
    fts_kb.add("configuration of the supercalifragilistic module", id="a")
    result = fts_kb.search("fragilis")
    assert result.answered_by == "substring" and result.ids == ["a"]


def test_filters_inside_retrievers(filled: KnowledgeBase) -> None:
    res = filled.search("billing", filters={"kind": "summary"}, limit=10)
    assert res.ids == ["m5"]
    res = filled.search("billing deploy data", filters={"metadata": {"team": "core"}}, limit=10)
    assert set(res.ids) <= {"m1", "m2"} and res.ids
    res = filled.search("anything at all", filters={"metadata": {"team": ["ops"]}}, mode="vector")
    assert set(res.ids) == {"m3", "m4", "m5"}


@pytest.mark.parametrize("bad", [{"colour": "red"}, {"kind": []}, {"metadata": "x"},
                                 {"kind": {"a": 1}}, {"created_after": "yesterday"},
                                 {"include_stale": "yes"}, ["kind"]])
def test_bad_filters_are_clear_errors(filled: KnowledgeBase, bad: object) -> None:
    with pytest.raises(InvalidFilterError):
        filled.search("billing", filters=bad)  # type: ignore[arg-type]


def test_unknown_corpus_is_error(filled: KnowledgeBase) -> None:
    with pytest.raises(NotFoundError, match="unknown corpus"):
        filled.search("x", corpora=["nope"])


@pytest.mark.parametrize("options", [{"mode": "fuzzy"}, {"limit": 0}, {"limit": -1}, {"offset": -1},
                                     {"fusion": "magic"}, {"rrf_k": 0}, {"weights": [1.0]},
                                     {"min_score": 2.0}, {"dedup_threshold": 1.5}])
def test_bad_options_are_clear_errors(filled: KnowledgeBase, options: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInputError):
        filled.search("billing", **options)


def test_ttl_expires_items(kb: KnowledgeBase) -> None:
    kb.add("ephemeral note about tokens", id="t", ttl=1.0)  # long enough for a loaded machine
    kb.add("durable note about tokens", id="d")
    assert set(kb.search("tokens").ids) == {"t", "d"}
    time.sleep(max(0.0, kb.get("t").expires_at - time.time()) + 0.05)
    assert kb.search("tokens").ids == ["d"]
    assert kb.search("tokens", mode="vector").ids == ["d"]
    with pytest.raises(NotFoundError):
        kb.get("t")
    assert kb.get("t", include_expired=True).id == "t"
    assert set(kb.search("tokens", filters={"include_expired": True}).ids) == {"t", "d"}
    assert kb.purge_expired() == 1
    assert kb.count() == 1


def test_stale_items_hidden_unless_asked(kb: KnowledgeBase) -> None:
    kb.add("old advice about caching", id="s", stale=True)
    assert kb.search("caching").ids == []
    assert kb.search("caching", filters={"include_stale": True}).ids == ["s"]


def test_wrong_vector_dimension_is_refused(kb: KnowledgeBase) -> None:
    with pytest.raises(DimensionMismatchError, match="'v'"):
        kb.add("text", id="v", vector=[0.1] * 10)
    assert kb.count() == 0


@pytest.mark.parametrize("vector", [[float("nan")] * 64, [float("inf")] + [0.0] * 63, [0.0] * 64])
def test_bad_vector_values_refused(kb: KnowledgeBase, vector: list[float]) -> None:
    with pytest.raises(InvalidInputError):
        kb.add("text", id="v", vector=vector)
    assert kb.count() == 0


def test_caller_vector_is_used(kb: KnowledgeBase) -> None:
    vec = np.zeros(64, dtype=np.float32)
    vec[3] = 1.0
    kb.add("anything", id="v", vector=vec)
    kb.add("other", id="w")
    query_hits = named(kb.backend, kb.backend.vector_search(vec, _scope(kb), 5))
    assert query_hits[0][0] == "v" and query_hits[0][1] == pytest.approx(1.0)


def _scope(kb: KnowledgeBase):  # type: ignore[no-untyped-def]
    from hybridkb.storage.contract import SearchArea

    return SearchArea(corpora=("default",), filters=hybridkb.Filters(), now=time.time())


@pytest.mark.parametrize("bad", [{"text": ""}, {"text": "   "}, {"text": 5}, {"text": "x", "id": ""},
                                 {"text": "x", "corpus": ""}, {"text": "x", "corpus": "a\nb"},
                                 {"text": "x", "metadata": {"a": object()}}, {"text": "x", "ttl": -1},
                                 {"text": "x", "colour": "red"}, {"text": "x" * 1_000_001},
                                 {"text": "bad \ud800 surrogate"}])
def test_bad_items_refused_and_batch_is_atomic(kb: KnowledgeBase, bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInputError):
        kb.add_many([{"text": "good one", "id": "g"}, bad])
    assert kb.count() == 0


def test_duplicate_id_in_batch_writes_nothing(kb: KnowledgeBase) -> None:
    kb.add("existing", id="e")
    with pytest.raises(InvalidInputError):
        kb.add_many([{"text": "new", "id": "n"}, {"text": "again", "id": "e"}])
    assert kb.count() == 1 and kb.get("e").text == "existing"


def test_unchanged_text_is_not_reembedded(target: str) -> None:
    class Counting(HashingEmbedder):
        calls = 0

        def embed_batch(self, texts):  # type: ignore[no-untyped-def]
            Counting.calls += len(texts)
            return super().embed_batch(texts)

    kb = hybridkb.open(target, embedder=Counting(64))
    kb.upsert("same text", id="a")
    kb.upsert("same text", id="a", kind="lesson")
    assert Counting.calls == 1
    kb.upsert("changed text", id="a")
    assert Counting.calls == 2
    kb.close()


def test_other_model_refuses_vectors_keeps_fts(target: str) -> None:
    kb = hybridkb.open(target, embedder=HashingEmbedder(64))
    kb.add("Run migration_032 first", id="a")
    kb.close()
    other = hybridkb.open(target, embedder=HashingEmbedder(32))
    with pytest.raises(EmbedderMismatchError, match=r"hashing-64.*hashing-32.*reembed"):
        other.search("migration", mode="vector")
    result = other.search("migration_032")
    assert result.ids == ["a"] and result.answered_by == "fts"
    assert other.reembed() == 1
    assert other.search("migration", mode="vector").ids == ["a"]
    other.close()
    reopened = hybridkb.open(target, embedder=HashingEmbedder(32))
    assert reopened.search("migration", mode="vector").ids == ["a"]
    reopened.close()


def test_fts_only_items_get_vectors_on_reembed(target: str) -> None:
    kb = hybridkb.open(target, embedder=None)
    kb.add("written without a model", id="a")
    kb.close()
    kb = hybridkb.open(target, embedder=HashingEmbedder(64))
    assert kb.stats()["items_without_vectors"] == 1
    assert kb.search("model", mode="vector").ids == []
    assert kb.reembed() == 1
    assert kb.search("model", mode="vector").ids == ["a"]
    kb.close()


def test_corpus_counts_follow_every_write(target: str) -> None:
    """The counts a search resolves its corpora from are kept by the writes themselves
    (SQLite: triggers, migration 010): inserts, upserts that move an item, deletes, another
    connection's commits, a failed batch."""
    kb = hybridkb.open(target, embedder=HashingEmbedder(16))
    other = hybridkb.open(target, embedder=HashingEmbedder(16))
    kb.add_many([{"text": f"note {i}", "id": f"n{i}", "corpus": "notes" if i % 3 else "wiki"}
                 for i in range(300)])
    assert kb.corpora() == {"notes": 200, "wiki": 100} and kb.count() == 300
    kb.upsert("moved to the wiki", id="n1", corpus="wiki")
    kb.upsert("rewritten in place", id="n2", corpus="notes")
    assert kb.corpora() == {"notes": 199, "wiki": 101} and kb.count("wiki") == 101
    assert kb.delete_many([f"n{i}" for i in range(0, 300, 3)]) == 100  # every first-made wiki item
    assert kb.corpora() == {"notes": 199, "wiki": 1}
    other.add("from another connection", id="x", corpus="extra")
    other.delete("n1")  # the wiki's last item
    assert kb.corpora() == {"extra": 1, "notes": 199} and kb.count() == 200 and kb.count("wiki") == 0
    with pytest.raises(InvalidInputError):  # a duplicate id fails the whole batch
        kb.add_many([{"text": "new", "id": "y", "corpus": "extra"}, {"text": "dup", "id": "x"}])
    assert kb.corpora() == {"extra": 1, "notes": 199}
    assert kb.check()["ok"]
    other.close()
    kb.close()


def test_corpora_and_labels(kb: KnowledgeBase) -> None:
    kb.add("Use feature flags for risky changes", corpus="wiki", title="Feature flags", kind="wiki_page")
    kb.add("def flag(name): return name in FLAGS", corpus="code", title="src/flags.py", kind="code")
    kb.add("Please guard this behind a feature flag", corpus="reviews", kind="review_comment",
           title="PR #123", source_url="https://example.test/pr/123")
    assert kb.corpora() == {"code": 1, "reviews": 1, "wiki": 1}
    result = kb.search("feature flag")
    labels = {h.corpus: h.source_label for h in result.hits}
    assert labels == {"wiki": "[wiki: Feature flags]", "code": "[code: src/flags.py]",
                      "reviews": "[review: PR #123]"}
    assert [h.source_url for h in result.hits if h.corpus == "reviews"] == ["https://example.test/pr/123"]
    only = kb.search("feature flag", corpora=["code"])
    assert {h.corpus for h in only.hits} == {"code"}
    kb.set_label_template("reviews", "[review {title}]")
    assert {h.source_label for h in kb.search("flag", corpora="reviews").hits} == {"[review PR #123]"}


def test_remember_recall_forget_touch(kb: KnowledgeBase) -> None:
    mem = kb.remember("Use SQLite for local storage", kind="decision")
    kb.remember("The standup is at nine", kind="temp_note", ttl=3600)
    result = kb.recall("SQLite storage")
    assert result.hits[0].id == mem
    assert result.hits[0].boosts["type"] == 2.0
    assert kb.get(mem).access_count == 1 and kb.get(mem).last_accessed_at is not None
    kb.recall("SQLite storage")
    assert kb.get(mem).access_count == 2
    assert kb.forget(mem) is True
    assert kb.recall("SQLite storage").ids != [mem]


def test_items_fts_vectors_agree_after_writes(kb: KnowledgeBase) -> None:
    kb.add_many([{"text": f"note number {i}", "id": f"n{i}"} for i in range(50)])
    kb.upsert_many([{"text": f"changed note {i}", "id": f"n{i}"} for i in range(0, 50, 2)])
    kb.delete_many([f"n{i}" for i in range(0, 50, 5)])
    if hasattr(kb.backend, "integrity_problems"):
        assert kb.backend.integrity_problems() == []
    assert kb.count() == 40


def test_item_records_round_trip(kb: KnowledgeBase) -> None:
    kb.add_many([Item(text="as a record", id="r", kind="lesson", scope="team", repo="r1",
                      namespace="ns", metadata={"k": [1, 2]})])
    item = kb.get("r")
    assert (item.scope, item.repo, item.namespace, item.metadata) == ("team", "r1", "ns", {"k": [1, 2]})
    assert kb.search("record", filters={"scope": "team", "repo": "r1", "namespace": "ns"}).ids == ["r"]
    assert kb.search("record", filters={"scope": "other"}).ids == []
