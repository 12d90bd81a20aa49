"""Ranking across corpora, the [0, 1] score, min_score, and near-duplicates that are
distinct answers. Real stores on both backends (the `kb` fixture, hashing embedder)."""

from __future__ import annotations

import random

import pytest

from hybridkb import KnowledgeBase, ScorePolicy
from hybridkb.errors import InvalidInputError
from hybridkb.scoring import boosted, relevance

DOCS = [
    ("k1", "Rotating TLS certificates", "The ingress controller reloads TLS certificates from the "
     "secret every hour, so a rotated certificate is served without a restart."),
    ("k2", "Certificate expiry alerts", "An alert fires fourteen days before a TLS certificate "
     "expires; the on-call engineer renews it with the cert-manager CLI."),
    ("k3", "Database backups", "Nightly backups of the orders database are copied to cold storage "
     "and restored weekly to check they work."),
    ("k4", "Cache warm-up", "After a deploy the product cache is warmed from the top thousand "
     "product pages before traffic shifts."),
]
QUERIES = ["how are TLS certificates rotated", "certificate expiry alert renew",
           "nightly database backups restore", "warm the product cache after deploy"]


def _fill(kb: KnowledgeBase) -> None:
    kb.add_many([{"id": i, "corpus": "runbooks", "title": t, "text": x} for i, t, x in DOCS])
    # A tiny unrelated corpus: one decision (boosted x2 by the score policy) and an
    # almost empty item, as a new user's first note and a scratch entry.
    kb.add("We decided to hold the team offsite in Lisbon in May.", id="note", corpus="notes",
           kind="decision")
    kb.add("ok", id="scratch", corpus="scratch")


@pytest.mark.parametrize("query", QUERIES)
def test_tiny_unrelated_corpus_never_takes_first_place(kb: KnowledgeBase, query: str) -> None:
    _fill(kb)
    own = kb.search(query, corpora=["runbooks"])
    every = kb.search(query)
    assert every.hits[0].id == own.hits[0].id and every.hits[0].corpus == "runbooks"
    assert every.hits[0].source_label.startswith("[runbooks")
    for hit in every.hits:
        if hit.corpus != "runbooks":
            assert hit.score < every.hits[0].score


def test_rrf_merge_still_gives_each_corpus_equal_say(kb: KnowledgeBase) -> None:
    _fill(kb)
    query = "how are TLS certificates rotated"
    interleaved = kb.search(query, merge="rrf", limit=6)
    # each corpus's first hit leads, whatever its relevance: the unrelated ones come in
    # the first three places
    assert {h.corpus for h in interleaved.hits[:3]} == {"runbooks", "notes", "scratch"}
    by_relevance = kb.search(query, limit=6)
    assert [h.corpus for h in by_relevance.hits[:2]] == ["runbooks", "runbooks"]
    with pytest.raises(InvalidInputError):
        kb.search(query, merge="alphabetical")


def test_scores_are_in_unit_range_and_ordered(kb: KnowledgeBase) -> None:
    _fill(kb)
    for mode in ("hybrid", "fts", "vector"):
        for merge in ("relevance", "rrf"):
            for query in [*QUERIES, "offsite", "zzz unknown words"]:
                hits = kb.search(query, mode=mode, merge=merge, limit=10).hits
                assert all(0.0 <= h.score <= 1.0 for h in hits), (mode, merge, query)
                assert all(0.0 <= h.relevance <= 1.0 for h in hits)
                if merge == "relevance":
                    scores = [h.score for h in hits]
                    assert scores == sorted(scores, reverse=True)


def test_min_score_drops_what_scores_lower(kb: KnowledgeBase) -> None:
    _fill(kb)
    query = "TLS certificate rotation and expiry"
    everything = kb.search(query, limit=10)
    assert len(everything) >= 4
    cut = (everything.hits[1].score + everything.hits[2].score) / 2
    kept = kb.search(query, limit=10, min_score=cut)
    assert kept.ids == everything.ids[:2]
    assert all(h.score >= cut for h in kept.hits)
    assert kb.search(query, limit=10, min_score=0.0).ids == everything.ids
    assert kb.search(query, limit=10, min_score=1.0).ids == [
        h.id for h in everything.hits if h.score == 1.0]
    with pytest.raises(InvalidInputError):
        kb.search(query, min_score=1.5)


def test_near_copy_that_answers_differently_is_kept(kb: KnowledgeBase) -> None:
    base = ("Raise the connection pool to forty when the checkout service runs more than six "
            "replicas, and keep the statement timeout at five seconds")
    kb.add(base, id="a")
    kb.add(base.replace("forty", "twenty"), id="b")  # one word apart: another answer
    kb.add(base + " .", id="a-copy")  # the same text stored twice: collapsed into a
    result = kb.search("connection pool replicas statement timeout", score_policy=ScorePolicy.off())
    assert "b" in result.ids
    assert result.ids.count("a") + result.ids.count("a-copy") == 1
    survivor = next(h for h in result.hits if h.id in ("a", "a-copy"))
    assert [s["id"] for s in survivor.alternate_sources] == (["a-copy"] if survivor.id == "a"
                                                             else ["a"])


# -- pure -------------------------------------------------------------------------------------


def test_relevance_and_boosts_stay_in_unit_range() -> None:
    rng = random.Random(3)
    assert relevance(0.5, 1.0) == 0.5 and relevance(2.0, 1.0) == 1.0 and relevance(1.0, 0.0) == 0.0
    assert relevance(float("nan"), 1.0) == 0.0
    for _ in range(500):
        r = rng.random()
        factors = {"type": rng.choice([0.3, 0.5, 1.0, 2.0]), "recency": rng.choice([1.0, 1.15])}
        out = boosted(r, factors)
        assert 0.0 <= out <= 1.0
        product = factors["type"] * factors["recency"]
        assert (out >= r) if product >= 1 else (out <= r)
    assert boosted(1.0, {"type": 0.3}) == 1.0 and boosted(0.0, {"type": 2.0}) == 0.0
    assert boosted(0.25, {"type": 2.0}) == pytest.approx(0.4)  # odds 1:3 doubled: 2:3
    # order among items with the same factors never changes
    assert boosted(0.3, {"type": 2.0}) < boosted(0.4, {"type": 2.0})
