"""End to end with the real default model (all-MiniLM-L6-v2, int8 ONNX, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb.cli import cli

pytestmark = pytest.mark.model


def test_model_embeds_normalized_and_deterministic() -> None:
    model = hybridkb.MiniLMEmbedder()
    vecs = model.embed_documents(["a short text", "another, longer text " * 60, "a short text"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vecs[0], vecs[2], atol=1e-6)
    # Batched and single embeddings agree (padding must not leak into the pooling).
    assert np.allclose(model.embed_query("a short text"), vecs[0], atol=1e-4)


def test_long_texts_are_not_cut_at_128_tokens() -> None:
    model = hybridkb.MiniLMEmbedder()
    head = "database storage engine " * 40  # ~120 tokens
    a, b = model.embed_documents([head + "cats and dogs " * 30, head + "rockets and planets " * 30])
    assert float(a @ b) < 0.995


def test_identifier_by_fts_paraphrase_by_vector(tmp_path: Path) -> None:
    db = str(tmp_path / "kb.db")
    runner = CliRunner()
    notes = [("m1", "Run migration_032 before deploying the billing service"),
             ("m2", "We keep all data in a single SQLite file on the local disk"),
             ("m3", "The team lunch is on Fridays at noon")]
    for item_id, text in notes:
        assert runner.invoke(cli, ["--db", db, "add", text, "--id", item_id]).exit_code == 0
    out = json.loads(runner.invoke(cli, ["--db", db, "--json", "search", "migration_032",
                                         "--mode", "fts"]).output)
    assert [h["id"] for h in out["hits"]] == ["m1"]
    out = json.loads(runner.invoke(cli, ["--db", db, "--json", "search",
                                         "where is information stored?", "--mode", "vector"]).output)
    assert out["hits"][0]["id"] == "m2"
    out = json.loads(runner.invoke(cli, ["--db", db, "--json", "search",
                                         "where is information stored?"]).output)
    assert out["hits"][0]["id"] == "m2" and out["answered_by"] == "vector"  # no shared keyword


def test_demo_prints_ranked_hits(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "demo.db"), "demo"])
    assert result.exit_code == 0, result.output
    assert "answered by: hybrid" in result.output and "  1. " in result.output
