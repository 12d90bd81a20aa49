"""Model changes and round trips.

- The store records its embedding model (name, version, dimension); another model is
  refused for vector search with both names and the fix, while full-text keeps working.
- `reembed` writes the new vectors beside the old ones and switches only when done;
  it resumes after a crash and copes with writes made meanwhile.
- `export` -> `import` and `migrate` carry every item field (timestamps, access
  counts, expiry, stale, metadata, vectors) and give the same search results.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import EmbedderMismatchError, HashingEmbedder, InvalidInputError, KnowledgeBase, transfer
from hybridkb.cli import cli
from hybridkb.storage import codec

NOW = time.time()
DAY = 86_400.0

ITEMS: list[dict[str, Any]] = [
    {"id": "d1", "text": "Use SQLite for local storage; one file per store", "kind": "decision",
     "corpus": "memory", "scope": "team", "created_at": NOW - 100 * DAY, "updated_at": NOW - 50 * DAY,
     "access_count": 7, "last_accessed_at": NOW - 2 * DAY, "metadata": {"team": "core", "n": [1, 2.5]}},
    {"id": "d2", "text": "Run migration_032 before deploying the billing service", "kind": "lesson",
     "corpus": "memory", "repo": "billing", "namespace": "ops", "created_at": NOW - 3 * DAY},
    {"id": "w1", "text": "Feature flags guard risky changes; remove them after rollout",
     "title": "Feature flags", "kind": "wiki_page", "corpus": "wiki",
     "source_url": "https://wiki.example/flags", "metadata": {"nested": {"a": {"b": None}}, "ok": True}},
    {"id": "w2", "text": "Old advice: cache everything in memcached", "corpus": "wiki", "stale": True,
     "created_at": NOW - 900 * DAY},
    {"id": "t1", "text": "Standup moved to nine thirty this week", "kind": "temp_note", "corpus": "memory",
     "expires_at": NOW + 7 * DAY},
    {"id": "t2", "text": "Expired reminder about the billing freeze", "kind": "temp_note",
     "corpus": "memory", "expires_at": NOW - DAY},
    {"id": "u1", "text": "日本語のメモ: データは一つのファイルに保存する 🎉", "corpus": "wiki",
     "metadata": {"lang": "ja", "emoji": "🎉"}},
    {"id": "c1", "text": "def flag(name):\n    return name in FLAGS  # C++ style? no", "kind": "code",
     "corpus": "code", "title": "src/flags.py", "metadata": {"path": "src/flags.py", "line": 1}},
] + [{"id": f"n{i}", "text": f"note {i} about storage billing flags and deployment step {i}",
      "corpus": "notes", "access_count": i, "created_at": NOW - i * DAY} for i in range(30)]

QUERIES = ["SQLite storage", "migration_032", "feature flags", "billing", "データ", "cache",
           "deployment step 7", "C++", "standup"]
SEARCHES: list[dict[str, Any]] = [{"mode": m} for m in ("hybrid", "fts", "vector")] + [
    {"filters": {"include_expired": True, "include_stale": True}},
    {"corpora": ["memory", "wiki"], "fusion": "dbsf"},
    {"filters": {"metadata": {"team": "core"}}, "mode": "fts"},
]


class CountingEmbedder(HashingEmbedder):
    """The test model, counting how many texts it embeds."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.embedded = 0

    def embed_batch(self, texts: Sequence[str]) -> Any:
        self.embedded += len(texts)
        return super().embed_batch(texts)


def fill(kb: KnowledgeBase) -> None:
    kb.add_many(ITEMS)
    kb.set_label_template("code", "[code {path}:{line}]")
    kb.recall("SQLite storage")  # bumps access counts through the public path


def items_of(kb: KnowledgeBase) -> list[dict[str, Any]]:
    return sorted((it.to_dict() for it in kb.iter_items()), key=lambda d: d["id"])


def results_of(kb: KnowledgeBase) -> list[list[tuple[str, str, float]]]:
    out = []
    for query in QUERIES:
        for options in SEARCHES:
            result = kb.search(query, limit=8, **options)
            out.append([(h.id, h.source_label, round(h.score, 5)) for h in result.hits])
    return out


def vector_results_of(kb: KnowledgeBase) -> list[list[str]]:
    return [kb.search(q, mode="vector", limit=8, dedup_threshold=None).ids for q in QUERIES]


def assert_same_store(a: KnowledgeBase, b: KnowledgeBase, *, vectors: bool = True) -> None:
    assert items_of(a) == items_of(b)
    if type(a.backend) is type(b.backend):
        assert results_of(a) == results_of(b)
    else:  # full-text ranking differs between backends (BM25 vs ts_rank); cosine does not
        assert vector_results_of(a) == vector_results_of(b)
        for query in ("migration_032", "memcached", "データ"):
            assert set(a.search(query, mode="fts").ids) == set(b.search(query, mode="fts").ids)
    if vectors:
        ids = [it["id"] for it in items_of(a)]
        va, vb = a.backend.vectors_for(ids), b.backend.vectors_for(ids)
        assert va.keys() == vb.keys() == set(ids)
        for item_id in ids:
            np.testing.assert_allclose(va[item_id], vb[item_id], atol=1e-6)


# -- the recorded model ---------------------------------------------------------------------


class Versioned(HashingEmbedder):
    version = "2"


def test_store_records_model_name_version_and_dimension(target: str) -> None:
    with hybridkb.open(target, embedder=HashingEmbedder(64)) as kb:
        kb.add("Run migration_032 first", id="a")
        meta = {k: kb.backend.get_meta(k) for k in ("embedder", "embedder_name", "embedder_version")}
        assert meta == {"embedder": "hashing-64@1", "embedder_name": "hashing-64", "embedder_version": "1"}
        assert kb.backend.vector_dim() == 64 and kb.stats()["vector_dim"] == 64
    with hybridkb.open(target, embedder=Versioned(64)) as other:  # same name and size, new version
        with pytest.raises(EmbedderMismatchError) as err:
            other.search("migration", mode="vector")
        assert "hashing-64@1" in str(err.value) and "hashing-64@2" in str(err.value)
        assert "hybridkb reembed" in str(err.value)
        result = other.search("migration_032")
        assert result.ids == ["a"] and result.answered_by == "fts"
        assert any("hashing-64@1" in note for note in result.notes)
        with pytest.raises(EmbedderMismatchError):  # no vectors of another model mixed in
            other.add("a new item", id="b")
        assert other.count() == 1


# -- reembed -----------------------------------------------------------------------------------


class Crash(Exception):
    pass


def crash_after(batches: int) -> Any:
    seen = [0]

    def progress(n: int) -> None:
        seen[0] += 1
        if seen[0] >= batches:
            raise Crash

    return progress


def test_reembed_switches_only_when_done_and_resumes(target: str) -> None:
    with hybridkb.open(target, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
    total = len(ITEMS)
    old = hybridkb.open(target, embedder=HashingEmbedder(64))
    new = hybridkb.open(target, embedder=CountingEmbedder(32))
    with pytest.raises(Crash):
        new.reembed(batch_size=8, progress=crash_after(2))
    # midway: the store still belongs to the old model, whose vector search still works
    assert new.embedder_name == old.embedder_name == "hashing-64@1"
    assert new.stats()["reembed_pending"] == "hashing-32@1"
    assert old.search("SQLite storage", mode="vector").ids[:1] == ["d1"]
    with pytest.raises(EmbedderMismatchError, match="finish switching it to 'hashing-32@1'"):
        new.search("SQLite storage", mode="vector")
    assert new.search("SQLite storage", mode="fts").ids[:1] == ["d1"]
    # writes by the old model meanwhile: a changed text, a new item, a deletion
    old.upsert("Use PostgreSQL for shared storage", id="d1", kind="decision", corpus="memory")
    old.add("Added while the switch was running", id="late", corpus="memory")
    old.delete("n3")
    # resumed (a new process would do the same): only what is not pending yet is embedded
    before = new.embedder.embedded  # type: ignore[union-attr]
    done = new.reembed(batch_size=8)
    assert new.embedder.embedded - before == done < total + 1  # type: ignore[union-attr]
    assert new.embedder_name == "hashing-32@1" and new.backend.vector_dim() == 32
    assert new.stats()["reembed_pending"] is None and new.stats()["items_without_vectors"] == 0
    assert new.backend.integrity_problems() == []
    vectors = new.backend.vectors_for(["d1", "late"])
    fresh = HashingEmbedder(32).embed_documents(["Use PostgreSQL for shared storage",
                                                 "Added while the switch was running"])
    np.testing.assert_allclose(vectors["d1"], codec.stored(fresh[0]), atol=1e-6)  # half precision
    np.testing.assert_allclose(vectors["late"], codec.stored(fresh[1]), atol=1e-6)
    assert new.search("PostgreSQL shared storage", mode="vector").ids[0] == "d1"
    # the old model's open handle notices the switch: no stale vectors, no mixing
    with pytest.raises(EmbedderMismatchError, match="hashing-32@1"):
        old.search("storage", mode="vector")
    with pytest.raises(EmbedderMismatchError):
        old.add("old model, after the switch", id="too-late")
    assert old.search("PostgreSQL", mode="fts").ids == ["d1"]
    old.close()
    new.close()


def test_reembed_back_to_the_recorded_model_drops_the_unfinished_switch(target: str) -> None:
    with hybridkb.open(target, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
    with hybridkb.open(target, embedder=HashingEmbedder(32)) as new, pytest.raises(Crash):
        new.reembed(batch_size=4, progress=crash_after(1))
    with hybridkb.open(target, embedder=HashingEmbedder(64)) as kb:
        assert kb.stats()["reembed_pending"] == "hashing-32@1"
        assert kb.reembed() == 0
        assert kb.stats()["reembed_pending"] is None
        assert kb.search("SQLite storage", mode="vector").ids[:1] == ["d1"]
    with hybridkb.open(target, embedder=HashingEmbedder(32)) as new:
        assert new.reembed(batch_size=16) == len(ITEMS)  # started over
        assert new.backend.integrity_problems() == []


def test_reembed_to_a_model_of_the_same_dimension(target: str) -> None:
    with hybridkb.open(target, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
    with hybridkb.open(target, embedder=Versioned(64)) as kb:
        assert kb.reembed(batch_size=5) == len(ITEMS)
        assert kb.embedder_name == "hashing-64@2"
        assert kb.backend.get_meta("embedder_version") == "2"
        assert kb.search("SQLite storage", mode="vector").ids[:1] == ["d1"]


def test_cli_reembed_shows_progress_and_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "cli.db")
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
    monkeypatch.setenv("HYBRIDKB_PROGRESS", "1")
    result = CliRunner().invoke(cli, ["--db", db, "--embedder", "hashing-32", "--json", "reembed",
                                      "--batch-size", "10"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"embedded": len(ITEMS), "embedder": "hashing-32@1"}
    assert "embedding" in result.stderr and "100%" in result.stderr


# -- export / import ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_vectors", [True, False])
def test_export_import_into_an_empty_store_gives_the_same_store(
        tmp_path: Path, target: str, with_vectors: bool) -> None:
    source = hybridkb.open(str(tmp_path / "source.db"), embedder=HashingEmbedder(64))
    fill(source)
    path = tmp_path / "export.jsonl"
    with path.open("w", encoding="utf-8") as out:
        assert transfer.write_export(source, out, vectors=with_vectors) == len(ITEMS)
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert header == {"hybridkb_export": 1, "embedder": "hashing-64@1", "vector_dim": 64,
                      "label_templates": {"code": "[code {path}:{line}]"}}
    model = CountingEmbedder(64)
    with hybridkb.open(target, embedder=model) as dest:
        report = transfer.import_file(dest, path, batch_size=7)
        assert report.imported == len(ITEMS) and not report.skipped
        assert model.embedded == (0 if with_vectors else len(ITEMS))
        assert_same_store(source, dest)
        assert dest.get("t2", include_expired=True).expires_at == ITEMS[5]["expires_at"]
        assert dest.get("d1").access_count == 8  # 7 given + 1 recall
    source.close()


def test_export_from_every_backend_imports_into_sqlite(kb: KnowledgeBase, tmp_path: Path) -> None:
    fill(kb)
    path = tmp_path / "out.jsonl"
    with path.open("w", encoding="utf-8") as out:
        transfer.write_export(kb, out, vectors=True)
    with hybridkb.open(str(tmp_path / "copy.db"), embedder=HashingEmbedder(64)) as copy:
        transfer.import_file(copy, path)
        assert_same_store(kb, copy)


def test_import_of_another_models_export_embeds_again(tmp_path: Path) -> None:
    with hybridkb.open(str(tmp_path / "a.db"), embedder=HashingEmbedder(64)) as source:
        fill(source)
        with (tmp_path / "a.jsonl").open("w", encoding="utf-8") as out:
            transfer.write_export(source, out, vectors=True)
    model = CountingEmbedder(32)
    with hybridkb.open(str(tmp_path / "b.db"), embedder=model) as dest:
        report = transfer.import_file(dest, tmp_path / "a.jsonl")
        assert model.embedded == len(ITEMS)
        assert any("hashing-64@1" in note and "hashing-32@1" in note for note in report.notes)
        assert dest.search("SQLite storage", mode="vector").ids[:1] == ["d1"]


def test_cli_export_import_round_trip(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    with hybridkb.open(src, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
    runner = CliRunner()
    base = ["--embedder", "hashing-64", "--json"]
    for name in ("all.jsonl.gz", "all.jsonl"):
        out = runner.invoke(cli, ["--db", src, *base, "export", str(tmp_path / name), "--vectors"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout) == {"exported": len(ITEMS), "file": str(tmp_path / name)}
    assert gzip.decompress((tmp_path / "all.jsonl.gz").read_bytes()).decode() == \
        (tmp_path / "all.jsonl").read_text(encoding="utf-8")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    piped = runner.invoke(cli, ["--db", src, *base, "export", "--corpus", "wiki"])
    assert piped.exit_code == 0
    lines = [json.loads(line) for line in piped.stdout.splitlines()]
    assert "hybridkb_export" in lines[0] and {r["corpus"] for r in lines[1:]} == {"wiki"}
    assert "vector" not in lines[1]
    out = runner.invoke(cli, ["--db", dst, *base, "import", str(tmp_path / "all.jsonl.gz")])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"imported": len(ITEMS), "skipped": 0}
    with hybridkb.open(src, embedder=HashingEmbedder(64)) as a, \
            hybridkb.open(dst, embedder=HashingEmbedder(64)) as b:
        assert_same_store(a, b)


def test_bad_export_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    path.write_text('{"hybridkb_export": 99}\n{"id": "x", "text": "y"}\n', encoding="utf-8")
    with hybridkb.open(str(tmp_path / "x.db"), embedder=HashingEmbedder(64)) as kb:
        with pytest.raises(InvalidInputError, match="unsupported export format 99"):
            transfer.import_file(kb, path)
        assert kb.count() == 0


# -- migrate ------------------------------------------------------------------------------------


def test_migrate_moves_a_store_with_its_vectors(tmp_path: Path, target: str) -> None:
    src = str(tmp_path / "src.db")
    with hybridkb.open(src, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
        before = items_of(kb)
    result = CliRunner().invoke(cli, ["--db", src, "--embedder", "hashing-64", "--json", "migrate",
                                      "--to", target, "--batch-size", "5"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["migrated"] == out["target_items"] == len(ITEMS) and out["notes"] == []
    with hybridkb.open(src, embedder=HashingEmbedder(64)) as a, \
            hybridkb.open(target, embedder=HashingEmbedder(64)) as b:
        assert items_of(a) == before  # the source is unchanged
        assert_same_store(a, b)
        assert b.backend.get_meta("label_templates") == a.backend.get_meta("label_templates")
    again = CliRunner().invoke(cli, ["--db", src, "--embedder", "hashing-64", "migrate", "--to", target])
    assert again.exit_code == 1 and "already holds" in again.output


def test_migrate_refuses_to_drop_vectors_silently(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    with hybridkb.open(src, embedder=HashingEmbedder(64)) as kb:
        fill(kb)
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", src, "--embedder", "hashing-32", "migrate", "--to", dst])
    assert result.exit_code == 1 and "hashing-64@1" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["--db", src, "--embedder", "hashing-32", "--json", "migrate", "--to", dst,
                                 "--no-vectors"])
    assert result.exit_code == 0, result.output
    with hybridkb.open(dst, embedder=HashingEmbedder(32)) as b:
        assert b.count() == len(ITEMS) and b.stats()["items_without_vectors"] == 0
        assert b.search("SQLite storage", mode="vector").ids[:1] == ["d1"]


def test_migrate_copies_vectors_instead_of_embedding(tmp_path: Path, target: str) -> None:
    with hybridkb.open(str(tmp_path / "src.db"), embedder=HashingEmbedder(64)) as source:
        fill(source)
        model = CountingEmbedder(64)
        with hybridkb.open(target, embedder=model) as dest:
            report = transfer.migrate(source, dest, batch_size=9)
            assert report.imported == len(ITEMS) and model.embedded == 0
            assert dest.stats()["items_without_vectors"] == 0
            with pytest.raises(InvalidInputError, match="already holds"):
                transfer.migrate(source, dest)
