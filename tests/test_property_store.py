"""Random sequences of writes, searches, re-embeds and checks through the Python API, on both
backends: after every step each committed item is found by id, by an exact term and by its
own vector, and `check` reports nothing (issue #13). Few examples by default; 10x with --slow."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hybridkb
from hybridkb import HashingEmbedder, InvalidInputError, KnowledgeBase

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet",
         "東京の天気", "数据库", "서울은"]
IDS = [f"item-{n}" for n in range(6)]

step = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(IDS), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
    st.tuples(st.just("upsert"), st.sampled_from(IDS), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.sampled_from(IDS), st.just([])),
    st.tuples(st.just("search"), st.sampled_from(IDS), st.lists(st.sampled_from(WORDS), max_size=3)),
    st.tuples(st.just("reembed"), st.sampled_from(IDS), st.just([])),
    st.tuples(st.just("check"), st.sampled_from(IDS), st.just([])),
)


def _assert_sound(kb: KnowledgeBase, model: dict[str, str]) -> None:
    assert kb.count() == len(model)
    for item_id, text in model.items():
        assert kb.get(item_id).text == text
        token = text.split()[0]  # unique per write
        assert kb.search(token, mode="fts", limit=5).ids == [item_id]
        assert item_id in kb.search(text, mode="vector", limit=3).ids
    assert kb.check() == {"target": kb.target, "ok": True, "repaired": [], "problems": []}


def test_random_sequences_keep_every_item_findable_and_the_store_sound(
        target: str, request: pytest.FixtureRequest) -> None:
    examples = 60 if request.config.getoption("--slow") else 6
    models = [HashingEmbedder(128), HashingEmbedder(128, name="hashing-b")]
    backend_kb = hybridkb.open(target, embedder=models[0])
    kbs = [backend_kb, KnowledgeBase(backend_kb.backend, models[1])]

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(step, min_size=1, max_size=10))
    def run(steps: list[tuple[str, str, list[str]]]) -> None:
        for item_id in list(backend_kb.backend.get(IDS, include_expired=True, now=0.0)):
            backend_kb.backend.delete([item_id.id])
        model: dict[str, str] = {}
        current = kbs[0]
        current.reembed()  # the store follows the current model from the start
        for serial, (op, item_id, words) in enumerate(steps):
            text = f"w{serial}x{item_id[-1]} {' '.join(words)}"
            if op == "add":
                if item_id in model:
                    with pytest.raises(InvalidInputError):
                        current.add(text, id=item_id)
                else:
                    assert current.add(text, id=item_id) == item_id
                    model[item_id] = text
            elif op == "upsert":
                assert current.upsert(text, id=item_id) == item_id
                model[item_id] = text
            elif op == "delete":
                assert current.delete(item_id) is (item_id in model)
                model.pop(item_id, None)
            elif op == "search":
                result = current.search(" ".join(words) or "nothing", limit=10)
                assert set(result.ids) <= set(model)
            elif op == "reembed":
                current = kbs[1] if current is kbs[0] else kbs[0]
                current.reembed()
            else:
                report: dict[str, Any] = current.check(repair=True)
                assert report["ok"] and report["repaired"] == []
            _assert_sound(current, model)

    try:
        run()
    finally:
        backend_kb.close()
