"""A reranker is code the caller brings: its failures never fail a search, and handing one to
`open` with a depth never changes the caller's object."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import hybridkb
from hybridkb import Reranker, get_reranker
from hybridkb.embedding.hashing import HashingEmbedder

DOCS = ["storage file one", "storage file sqlite", "storage file data", "storage relevant", "storage file"]


class Scripted(Reranker):
    """Answers what it is told to: scores, a wrong count, NaN, or an exception."""

    name = "scripted"

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if self.answer == "raise":
            raise RuntimeError("model file gone")
        if self.answer == "short":
            return [0.5]
        if self.answer == "nan":
            return [float("nan")] * len(texts)
        return [1.0 if "relevant" in t else 0.1 for t in texts]


def fused_order(path: Path) -> list[str]:
    with hybridkb.open(path, embedder=HashingEmbedder(32)) as kb:
        for text in DOCS:
            kb.add(text)
        return [h.text for h in kb.search("storage file", limit=5).hits]


@pytest.mark.parametrize(("answer", "note"), [("raise", "the reranker failed (RuntimeError: model file gone)"),
                                              ("short", "the reranker gave 1 scores for 5 texts"),
                                              ("nan", "some not finite")])
def test_a_failing_reranker_leaves_the_fused_order_with_a_note(tmp_path: Path, answer: str, note: str) -> None:
    plain = fused_order(tmp_path / "kb.db")
    with hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(32), rerank=Scripted(answer)) as kb:
        result = kb.search("storage file", limit=5)
    assert [h.text for h in result.hits] == plain
    assert all(h.rerank_score is None for h in result.hits)
    assert any(note in n and "fused order" in n for n in result.notes), result.notes


def test_a_working_reranker_still_reorders(tmp_path: Path) -> None:
    plain = fused_order(tmp_path / "kb.db")
    assert plain[0] != "storage relevant"
    with hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(32), rerank=Scripted("ok")) as kb:
        result = kb.search("storage file", limit=5)
    assert result.hits[0].text == "storage relevant" and result.hits[0].rerank_score == 1.0
    assert not any("reranker" in n for n in result.notes)


def test_a_depth_given_to_open_leaves_the_callers_reranker_alone() -> None:
    mine = Scripted("ok")
    mine.depth = 7
    used = get_reranker(mine, 3)
    assert used is not None and used.depth == 3 and mine.depth == 7
    assert get_reranker(mine) is mine
