"""Word prints of a large load computed by a second process (print_worker.py, batches.py):
the same prints as in the writing process, on both backends, the same batches written when
an item fails, and the store's own computation whenever the worker cannot help."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pytest
from test_word_prints import _prints

import hybridkb
from hybridkb import InvalidInputError, KnowledgeBase, batches, dedup, print_worker

TEXTS = ["", "plain words, and punctuation!", "naïve café’s “quote”", "a\ud800b lone surrogate",
         "日本語のテキスト abc", "Σίσυφος ΌΣΟΣ", "word " * 5_000]

ITEM_TEXTS = [t for t in TEXTS if "\ud800" not in t]  # the store refuses lone surrogates

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX pipes only")


def test_the_worker_computes_the_prints_the_store_would() -> None:
    worker = print_worker.PrintWorker()
    try:
        worker.submit(TEXTS)
        assert worker.collect() == [dedup.word_print(t) for t in TEXTS]
        worker.submit(TEXTS[:2])  # one process answers batch after batch
        assert worker.collect() == [dedup.word_print(t) for t in TEXTS[:2]]
        worker.submit([])
        assert worker.collect() == []
    finally:
        worker.close()


def test_a_worker_that_dies_is_reported_not_raised() -> None:
    worker = print_worker.PrintWorker()
    try:
        worker.submit(TEXTS)
        assert worker.collect() is not None
        assert worker._proc is not None
        os.kill(worker._proc.pid, signal.SIGKILL)
        worker._proc.wait()
        worker.submit(TEXTS)
        assert worker.collect() is None
        assert worker.failed
        worker.submit(TEXTS)  # a failed worker takes no more work
        assert worker.collect() is None
    finally:
        worker.close()


def test_a_worker_that_cannot_start_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    worker = print_worker.PrintWorker()
    assert worker.failed
    worker.submit(TEXTS)
    assert worker.collect() is None
    worker.close()


def test_the_worker_starts_only_with_a_core_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(print_worker, "_cpus", lambda: print_worker.MIN_CPUS - 1)
    assert not print_worker.available()
    monkeypatch.setattr(print_worker, "_cpus", lambda: print_worker.MIN_CPUS)
    assert print_worker.available()


def _items(n: int) -> list[dict[str, Any]]:
    return [{"id": f"i{k:03d}", "text": f"{ITEM_TEXTS[k % len(ITEM_TEXTS)]} item {k} words {k * 7 % 11}"}
            for k in range(n)]


@pytest.fixture
def ahead(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The worker from the third batch of 5 on, whatever the cores; counts the batches it
    answered."""
    monkeypatch.setattr(batches, "PRINTS_AHEAD_MIN", 10)
    monkeypatch.setattr(print_worker, "MIN_CPUS", 1)
    answered: list[int] = []
    collect = print_worker.PrintWorker.collect

    def counted(self: print_worker.PrintWorker) -> list[int] | None:
        got = collect(self)
        if got is not None:
            answered.append(len(got))
        return got

    monkeypatch.setattr(print_worker.PrintWorker, "collect", counted)
    return answered


def test_a_large_load_is_stored_with_the_workers_prints(
        kb: KnowledgeBase, target: str, ahead: list[int]) -> None:
    items = _items(43)
    progress: list[int] = []
    ids = kb.add_many(items, batch_size=5, progress=progress.append)
    assert ids == [i["id"] for i in items]  # in order, every batch
    assert progress == [5] * 8 + [3]
    # Batches 3-8 went through the worker (it started with batch 2, written meanwhile by
    # the store itself); the last, short one not.
    assert ahead == [5] * 6
    assert _prints(target) == {i["id"]: dedup.word_print(i["text"]) for i in items}
    assert [h.id for h in kb.search("item 41", mode="fts", limit=50).hits].count("i041") == 1


def test_a_failing_item_leaves_the_batches_before_it_written(
        kb: KnowledgeBase, target: str, ahead: list[int]) -> None:
    items = _items(40)
    items[27]["created_at"] = "not a time"  # batch 5 (items 25-29) fails while preparing
    with pytest.raises(InvalidInputError, match="i027"):
        kb.add_many(items, batch_size=5)
    # Batch 4 was with the worker when item 27 failed: written before the error, as batches
    # 0-4 are without the worker.
    assert ahead[-1:] == [5]
    assert sorted(_prints(target)) == [f"i{k:03d}" for k in range(25)]
    assert _prints(target) == {i["id"]: dedup.word_print(i["text"]) for i in items[:25]}


def test_a_failing_iterator_leaves_the_batches_before_it_written(
        kb: KnowledgeBase, target: str, ahead: list[int]) -> None:
    def source() -> Any:
        yield from _items(22)
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        kb.add_many(source(), batch_size=5)
    assert sorted(_prints(target)) == [f"i{k:03d}" for k in range(20)]


def test_without_a_worker_the_store_computes_the_prints(
        target: str, ahead: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with hybridkb.open(target, embedder=None) as kb:
        items = _items(31)
        assert kb.add_many(items, batch_size=5) == [i["id"] for i in items]
    assert ahead == []
    assert _prints(target) == {i["id"]: dedup.word_print(i["text"]) for i in items}
