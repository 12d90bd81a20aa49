"""Knowledge features on real stores: corpora, duplicates, boosts, min_score, pagination."""

from __future__ import annotations

import time

import pytest

from hybridkb import KnowledgeBase, ScorePolicy
from hybridkb.scoring import DAY_S, boosted_by

POLICY_OFF = ScorePolicy.off()


def test_duplicates_collapse_within_corpus_before_fusion(kb: KnowledgeBase) -> None:
    text = "Rotate the signing keys every ninety days"
    kb.add(text, id="a1")
    kb.add(text + ".", id="a2")  # same tokens
    kb.add("Keys for signing are rotated quarterly by the platform team", id="b")
    result = kb.search("rotate signing keys", score_policy=POLICY_OFF)
    ids = result.ids
    assert ids.count("a1") + ids.count("a2") == 1
    survivor = result.hits[ids.index("a1" if "a1" in ids else "a2")]
    assert [a["id"] for a in survivor.alternate_sources] in (["a2"], ["a1"])
    assert kb.search("rotate signing keys", dedup_threshold=None).ids.count("a2") == 1


def test_duplicates_collapse_across_corpora_with_labels(kb: KnowledgeBase) -> None:
    text = "Deploys freeze on Fridays after noon"
    kb.add(text, id="w", corpus="wiki", title="Release policy", kind="wiki_page")
    kb.add(text, id="r", corpus="reviews", title="PR #7", kind="review_comment")
    kb.add("Friday lunch menu", id="x", corpus="wiki", kind="wiki_page", title="Lunch")
    result = kb.search("deploy freeze friday", score_policy=POLICY_OFF)
    found = [h for h in result.hits if h.id in ("w", "r")]
    assert len(found) == 1
    other = "r" if found[0].id == "w" else "w"
    label = "[review: PR #7]" if other == "r" else "[wiki: Release policy]"
    assert found[0].alternate_sources == [{"id": other, "source": label}]


def test_cosine_dedup_option(kb: KnowledgeBase) -> None:
    kb.add("alpha beta gamma delta", id="p")
    kb.add("delta gamma beta alpha epsilon zeta eta theta", id="q")  # Jaccard 0.5
    assert set(kb.search("alpha beta", mode="vector").ids) == {"p", "q"}
    collapsed = kb.search("alpha beta", mode="vector", dedup_cosine=0.5)
    assert len(collapsed.ids) == 1 and collapsed.hits[0].alternate_sources


def test_rrf_merge_gives_each_corpus_equal_say(kb: KnowledgeBase) -> None:
    kb.add_many([{"text": f"cache invalidation note {i}", "corpus": "big"} for i in range(40)])
    kb.add("cache invalidation in the code", corpus="code", id="c")
    kb.add("cache invalidation review", corpus="reviews", id="r")
    result = kb.search("cache invalidation", limit=5, score_policy=POLICY_OFF, merge="rrf")
    corpora = [h.corpus for h in result.hits]
    assert {"big", "code", "reviews"} <= set(corpora)
    assert corpora[:3].count("big") == 1  # the three corpora's best hits lead


def test_min_score_is_normalized(kb: KnowledgeBase) -> None:
    kb.add("exact phrase match here", id="top")
    kb.add_many([{"text": f"unrelated words number {i}"} for i in range(10)])
    everything = kb.search("exact phrase match", score_policy=POLICY_OFF)
    assert len(everything) > 1
    strict = kb.search("exact phrase match", min_score=0.5, score_policy=POLICY_OFF)
    assert strict.ids == ["top"]  # every term, first in both retrievers: a likely answer
    assert all(h.score < 0.2 for h in everything.hits[1:])  # the others share no word
    assert kb.search("exact phrase match", min_score=0.0).ids == everything.ids


def test_type_weight_reorders_and_shows(kb: KnowledgeBase) -> None:
    kb.add("bazel caching", id="best")  # first in both lists, every term: the strongest evidence
    kb.add("the build uses bazel for caching in the monorepo", id="note", kind="temp_note")
    kb.add("the build uses bazel for caching in the monorepo!", id="dec", kind="decision")
    result = kb.search("bazel caching", dedup_threshold=None)
    assert result.ids == ["best", "dec", "note"]
    dec, note = result.hits[1], result.hits[2]
    assert dec.boosts["type"] == 2.0 and note.boosts["type"] == 0.3
    # the factors multiply the relevance's odds, staying in [0, 1]
    assert dec.score == pytest.approx(boosted_by(dec.relevance, 2.0 * 1.15))
    assert note.score == pytest.approx(boosted_by(note.relevance, 0.3 * 1.15))
    assert 0.0 < note.score < dec.score < result.hits[0].score <= 1.0
    off = kb.search("bazel caching", dedup_threshold=None,
                    score_policy=ScorePolicy(type_weights={"decision": 1.0, "temp_note": 5.0}))
    assert off.ids == ["best", "note", "dec"]


def test_hits_sharing_factors_each_get_their_own(kb: KnowledgeBase) -> None:
    """A search works out each distinct set of factors once; every hit still gets its own
    dict, and items whose recency differs do not share one."""
    long_ago = time.time() - 400 * DAY_S
    kb.add("cache the bazel build outputs", id="d1", kind="decision")
    kb.add("cache the bazel build outputs remotely", id="d2", kind="decision")
    kb.add("cache bazel build outputs on the old runners", id="d3", kind="decision",
           created_at=long_ago)
    hits = {h.id: h for h in kb.search("bazel build cache", dedup_threshold=None).hits}
    assert hits["d1"].boosts == hits["d2"].boosts == {"type": 2.0, "recency": 1.15}
    assert hits["d3"].boosts == {"type": 2.0}
    hits["d1"].boosts["type"] = 99.0
    assert hits["d2"].boosts["type"] == 2.0
    assert hits["d3"].score == pytest.approx(boosted_by(hits["d3"].relevance, 2.0))


def test_recency_boost_but_old_relevant_item_surfaces(kb: KnowledgeBase) -> None:
    long_ago = time.time() - 400 * DAY_S
    kb.add("postgres connection pooling with pgbouncer in transaction mode", id="old",
           created_at=long_ago)
    kb.add("lunch options near the office", id="new")
    result = kb.search("pgbouncer transaction pooling")
    assert result.ids[0] == "old"
    assert "recency" not in result.hits[0].boosts
    assert kb.get("old").created_at == pytest.approx(long_ago)
    new_hit = next(h for h in result.hits if h.id == "new")
    assert new_hit.boosts.get("recency") == pytest.approx(1.15)


def test_access_boost_from_touch(kb: KnowledgeBase) -> None:
    kb.add("retry with exponential backoff", id="a")
    kb.add("retry with exponential backoff and jitter", id="b")
    for _ in range(3):
        kb.search("jitter", touch=True, limit=1)
    assert kb.get("b").access_count == 3 and kb.get("a").access_count == 0
    hit = next(h for h in kb.search("retry backoff", dedup_threshold=None).hits if h.id == "b")
    assert hit.boosts["access"] == pytest.approx(1 + __import__("math").log(4))


def test_filters_still_fill_limit(kb: KnowledgeBase) -> None:
    kb.add_many([{"text": f"shared topic text {i}", "kind": "lesson" if i % 10 == 0 else "memory"}
                 for i in range(300)])
    for mode in ("fts", "vector", "hybrid"):
        result = kb.search("shared topic", mode=mode, limit=10, filters={"kind": "lesson"})
        assert len(result) == 10, mode
        assert {h.kind for h in result.hits} == {"lesson"}


def test_time_range_filters(kb: KnowledgeBase) -> None:
    now = time.time()
    kb.add("incident report database outage", id="old", created_at=now - 10 * DAY_S)
    kb.add("incident report network outage", id="new", created_at=now - 1 * DAY_S)
    res = kb.search("incident outage", filters={"created_after": now - 5 * DAY_S})
    assert res.ids == ["new"]
    res = kb.search("incident outage", filters={"created_before": now - 5 * DAY_S})
    assert res.ids == ["old"]


def test_pagination_stable_across_pages(kb: KnowledgeBase) -> None:
    kb.add_many([{"text": f"paged result about widgets number {i}", "id": f"w{i:02d}"}
                 for i in range(35)])
    full = kb.search("widgets", limit=35, dedup_threshold=None).ids
    pages: list[str] = []
    for offset in range(0, 35, 10):
        pages.extend(kb.search("widgets", limit=10, offset=offset, dedup_threshold=None).ids)
    assert pages == full and len(set(pages)) == 35


def test_deprecated_search_keywords_warn_and_keep_working(kb: KnowledgeBase) -> None:
    text = "Rotate the signing keys every ninety days"
    kb.add(text, id="a1")
    kb.add(text + ".", id="a2")
    with pytest.warns(DeprecationWarning, match="dedup_threshold"):
        old_off = kb.search("rotate signing keys", dedup=None, score_policy=POLICY_OFF).ids
    assert sorted(old_off) == ["a1", "a2"]  # dedup=None still turns the collapse off
    assert old_off == kb.search("rotate signing keys", dedup_threshold=None,
                                score_policy=POLICY_OFF).ids
    with pytest.warns(DeprecationWarning, match="explain"):
        explained = kb.search("rotate signing keys", explain=True)
    assert len(explained.hits) == 1 and explained.hits[0].retrievers  # explanations are always on
