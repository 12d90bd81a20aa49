"""`hybridkb optimize` / `KnowledgeBase.optimize()`: the derived indexes built to completion
in the foreground (a short-lived process never sees the background graph build finish).
Real store files, real tantivy and usearch indexes, the CLI through click's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.cli import cli
from hybridkb.storage.indexes import vector_base

N = 120


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(vector_base, "ANN_MIN_ROWS", 100)  # a graph is due at this size
    db = tmp_path / "opt.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(64)) as kb:
        kb.add_many([{"id": f"d{i}", "text": f"document {i} about {'owls' if i % 2 else 'bats'}"}
                     for i in range(N)])
    return db


def published(db: Path) -> Path | None:
    with hybridkb.open(str(db), embedder=None) as kb:
        row = kb.backend._changes.published("vectors")
        assert kb.backend.index_dir is not None
        return None if row is None else kb.backend.index_dir / "vectors" / \
            vector_base.split_generation(row[0])[0]


def test_optimize_builds_the_text_index_and_the_graph(store: Path, monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    before = published(store)  # add_many built a flat base; the graph is optimize's (or a search's)
    assert before is not None and not (before / "ann.usearch").exists()
    monkeypatch.setenv("HYBRIDKB_PROGRESS", "1")
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(store), "optimize"])
    assert result.exit_code == 0, result.output
    assert f"text index: {N} documents" in result.stdout
    assert (f"vector index: {N} vectors, HNSW graph, recall@10 1.0 at ef 128, measured on "
            f"pseudo-queries, built now") in result.stdout
    assert "vector index: graph" in result.stderr  # the progress bar of the graph build
    folder = published(store)
    assert folder is not None and (folder / "ann.usearch").is_file()
    assert json.loads((folder / "meta.json").read_text())["ann"] is True

    again = json.loads(runner.invoke(cli, ["--db", str(store), "--json", "optimize"]).stdout)
    assert again["vector_base_built"] is False and again["graph"] is True  # already current
    assert published(store) == folder

    with hybridkb.open(str(store), embedder=HashingEmbedder(64)) as kb:
        kb.add("a late document about owls", id="late")
        report = kb.optimize()
        assert report["vector_base_built"] is True and report["vectors"] == N + 1
        assert report["text_documents"] == N + 1
        assert "late" in {h.id for h in kb.search("late owls", mode="vector").hits}


def test_optimize_on_a_store_without_vectors(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    with hybridkb.open(str(db), embedder=None) as kb:
        kb.add("only text here", id="t1")
        assert kb.optimize() == {"text_documents": 1, "text_seq": 1, "reclaimed_bytes": 0}
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "missing.db"), "optimize"])
    assert result.exit_code != 0 and "no store" in result.output


def test_optimize_reports_the_codes_when_they_hold_recall(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Past CODES_MIN_ROWS the base carries one-bit codes; below ANN_MIN_ROWS no graph is due
    when they hold recall, and the report says which pass searches use."""
    monkeypatch.setattr(vector_base, "CODES_MIN_ROWS", 100)
    db = tmp_path / "codes.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(64)) as kb:
        kb.add_many([{"id": f"d{i}", "text": f"document {i} about owls"} for i in range(N)])
    result = CliRunner().invoke(cli, ["--db", str(db), "optimize"])
    assert result.exit_code == 0, result.output
    assert f"vector index: {N} vectors, one-bit codes, recall@10 1.0 rescoring {N} rows" in result.stdout
    folder = published(db)
    assert folder is not None and (folder / "codes.u64").is_file() and not (folder / "ann.usearch").exists()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["ann"] is False and meta["codes"]["rescore"] == N


def test_optimize_answers_a_dict_on_every_backend(kb: KnowledgeBase) -> None:
    """PostgreSQL's backend optimizes in place and returns nothing: that raised a TypeError."""
    kb.add("merge the BM25 blocks", id="a")
    report = kb.optimize()
    assert isinstance(report, dict)
    assert kb.search("blocks", mode="fts").ids == ["a"]
