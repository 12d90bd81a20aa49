"""add_many's batches when the caller names no size (batches.py): small while the model
embeds on the way, growing to large while nothing is to embed, each one transaction, on
both backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hybridkb import InvalidInputError, KnowledgeBase, batches


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batches, "BATCH", 4)
    monkeypatch.setattr(batches, "LARGE_BATCH", 10)


def _items(n: int, *, vectors: bool, start: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(start)
    return [{"id": f"i{i:03d}", "text": f"item {i} about kestrels",
             **({"vector": rng.standard_normal(64).astype(np.float32)} if vectors else {})}
            for i in range(start, start + n)]


def test_vectors_given_go_in_large_batches(kb: KnowledgeBase) -> None:
    progress: list[int] = []
    kb.add_many(_items(35, vectors=True), progress=progress.append)
    assert progress == [4, 8, 10, 10, 3]  # from the small size, doubling up to the large
    assert kb.count() == 35


def test_items_the_model_embeds_go_in_small_batches(kb: KnowledgeBase) -> None:
    progress: list[int] = []
    kb.add_many(_items(9, vectors=False), progress=progress.append)
    assert progress == [4, 4, 1]
    assert kb.search("kestrels", mode="vector").hits


def test_deferred_embedding_goes_in_large_batches(kb: KnowledgeBase) -> None:
    progress: list[int] = []
    kb.add_many(_items(25, vectors=False), progress=progress.append, embed="defer")
    assert progress == [4, 8, 10, 3]


def test_a_store_without_a_model_goes_in_large_batches(fts_kb: KnowledgeBase) -> None:
    progress: list[int] = []
    fts_kb.add_many(_items(25, vectors=False), progress=progress.append)
    assert progress == [4, 8, 10, 3]
    assert len(fts_kb.search("kestrels", mode="fts", limit=30).hits) == 25


def test_an_item_to_embed_closes_a_large_batch_at_the_small_size(kb: KnowledgeBase) -> None:
    """Seventeen items with vectors, then one without: the third batch is full at six (past
    four); the next grows from there."""
    items = _items(17, vectors=True) + _items(1, vectors=False, start=17) + _items(14, vectors=True, start=18)
    progress: list[int] = []
    kb.add_many(items, progress=progress.append)
    assert progress == [4, 8, 6, 10, 4]
    assert kb.count() == 32


def test_a_named_size_is_kept_and_each_batch_is_all_or_nothing(kb: KnowledgeBase) -> None:
    progress: list[int] = []
    kb.add_many(_items(7, vectors=True), batch_size=3, progress=progress.append)
    assert progress == [3, 3, 1]
    items = _items(25, vectors=True, start=100)
    items[14]["id"] = items[13]["id"]  # the third batch (items 12-21) holds a twin
    with pytest.raises(InvalidInputError, match="twice in one batch"):
        kb.add_many(items)
    assert kb.count() == 7 + 12  # the batches before it are in, that one none of it
    with pytest.raises(InvalidInputError, match="batch_size"):
        kb.add_many(_items(2, vectors=True), batch_size=0)
