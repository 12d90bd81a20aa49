"""Damaged derived indexes (issue 40): SQLite's text and vector indexes verify their files.

Each damage the red team did to a real store's index files, on a real store: `check`
reports it, searches answer right (the index rebuilt from the items, or the store scanned)
with a note and never a traceback or a panic, and `check --repair` fixes it. PostgreSQL
keeps its indexes inside the database (nothing beside it to damage), so this is SQLite's.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.storage.indexes import verify

DIM = 64
N = 2400
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma".split()
PROBES = list(range(0, N, N // 20))[:20]


def open_kb(path: Path) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(DIM))


def text_of(i: int) -> str:
    rng = np.random.default_rng(i)
    return f"item{i} " + " ".join(rng.choice(WORDS, 10))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pristine")
    kb = open_kb(folder / "kb.db")
    kb.add_many([{"id": f"it{i}", "text": text_of(i), "corpus": "abc"[i % 3]} for i in range(N)])
    kb.optimize()
    kb.close()
    return folder


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "s")
    return tmp_path / "s" / "kb.db"


def index_dir(db: Path) -> Path:
    return db.with_name(db.name + ".idx")


def largest(db: Path, pattern: str) -> Path:
    return Path(max(glob.glob(str(index_dir(db) / "text" / pattern)), key=os.path.getsize))


def generation(db: Path) -> Path:
    (found,) = [p for p in (index_dir(db) / "vectors").iterdir() if p.is_dir()]
    return found


def overwrite(path: Path, n: int, at: int) -> None:
    size = path.stat().st_size
    at = max(0, size - n - 32) if at < 0 else at
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(np.random.default_rng(7).bytes(min(n, size - at)))


def roll(path: Path, dtype: type, width: int) -> None:
    rows = np.fromfile(path, dtype=dtype).reshape(-1, width)
    np.roll(rows, 1, axis=0).tofile(path)


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def folder_is_a_file(db: Path) -> None:
    shutil.rmtree(index_dir(db))
    index_dir(db).write_text("not a folder")


DAMAGES: dict[str, Callable[[Path], None]] = {
    "term 4 KB at the start": lambda db: overwrite(largest(db, "*.term"), 4096, 0),
    "term 4 KB in the middle": lambda db: overwrite(largest(db, "*.term"), 4096,
                                                    largest(db, "*.term").stat().st_size // 2),
    "term 4 KB at the end": lambda db: overwrite(largest(db, "*.term"), 4096, -1),
    "fast 4 KB": lambda db: overwrite(largest(db, "*.fast"), 4096, 0),
    "fast 4 KB at the end": lambda db: overwrite(largest(db, "*.fast"), 4096, -1),
    "idx 4 KB": lambda db: overwrite(largest(db, "*.idx"), 4096, 0),
    "term truncated": lambda db: truncate(largest(db, "*.term")),
    "matrix rows rolled": lambda db: roll(generation(db) / "matrix.f32", np.float32, DIM),
    "rowids rolled": lambda db: roll(generation(db) / "rowids.i64", np.int64, 1),
    "matrix 200 KB": lambda db: overwrite(generation(db) / "matrix.f32", 200_000, 0),
    "corpus 8 KB": lambda db: overwrite(generation(db) / "corpus.i32", 8192, 0),
    "matrix truncated": lambda db: truncate(generation(db) / "matrix.f32"),
    "rowids truncated": lambda db: truncate(generation(db) / "rowids.i64"),
    "index folder is a file": folder_is_a_file,
}


def answers_right(kb: KnowledgeBase) -> list[str]:
    """Every probe found first by its own words (full text) and its own text (vectors),
    searched in its corpus; returns the notes the searches carried."""
    notes: list[str] = []
    for i in PROBES:
        corpus = "abc"[i % 3]
        fts = kb.search(f"item{i}", mode="fts", corpus=corpus, limit=3)
        vec = kb.search(text_of(i), mode="vector", corpus=corpus, limit=3)
        hyb = kb.search(text_of(i), corpus=corpus, limit=3)
        assert fts.ids[:1] == [f"it{i}"], (i, fts.ids, fts.notes)
        assert vec.ids[:1] == [f"it{i}"], (i, vec.ids, vec.notes)
        assert f"it{i}" in hyb.ids, (i, hyb.ids, hyb.notes)
        notes += [n for r in (fts, vec, hyb) for n in r.notes
                  if n not in notes and not n.startswith("no confident match")]  # the index's notes
    return notes


def test_a_sound_store_checks_ok_and_answers_without_notes(store: Path) -> None:
    kb = open_kb(store)
    assert kb.check()["ok"]
    assert answers_right(kb) == []
    kb.close()


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_check_finds_the_damage_and_searches_answer_right(store: Path, damage: str) -> None:
    DAMAGES[damage](store)
    kb = open_kb(store)
    report = kb.check()
    assert not report["ok"], report
    assert any("index" in p["problem"] for p in report["problems"]), report
    notes = answers_right(kb)  # rebuilt at the first search (or the store scanned): right
    assert notes, "a search that met a damaged index says so"
    assert all("index" in n for n in notes), notes
    kb.close()


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_check_repair_fixes_the_damage(store: Path, damage: str) -> None:
    DAMAGES[damage](store)
    kb = open_kb(store)
    report = kb.check(repair=True)
    assert report["ok"], report
    assert any("rebuilt" in line for line in report["repaired"]), report
    kb.close()
    again = open_kb(store)
    assert again.check()["ok"]
    assert answers_right(again) == []  # nothing left to note
    again.close()


def test_damage_under_an_open_text_index_is_a_note_not_a_panic(store: Path) -> None:
    """tantivy panics (pyo3_runtime.PanicException, a BaseException) on a fast-field file
    overwritten while it is open: the search scans the store instead, the next one reopens
    the index, finds the file changed and rebuilds it."""
    kb = open_kb(store)
    assert kb.search("item5", mode="fts").ids[:1] == ["it5"]
    path = largest(store, "*.fast")
    overwrite(path, path.stat().st_size, 0)
    first = kb.search("item5", mode="fts")
    assert first.ids[:1] == ["it5"]
    assert any("full-text index unusable" in n for n in first.notes), first.notes
    then = kb.search("item5", mode="fts")
    assert then.ids[:1] == ["it5"] and any("rebuilt" in n for n in then.notes), then.notes
    assert kb.check()["ok"]
    kb.close()


def test_excluded_words_hold_while_the_text_index_is_unusable(store: Path) -> None:
    """`-word` in a vector search needs the rows holding the word: with the text index
    failing under the search, the stored items are read for them instead (with a note)."""
    kb = open_kb(store)
    assert "it5" in kb.search("item5 alpha", mode="vector", limit=50).ids
    assert kb.search("item5", mode="fts").ids[:1] == ["it5"]  # the text index is open
    path = largest(store, "*.fast")
    overwrite(path, path.stat().st_size, 0)
    result = kb.search("item5 alpha -item5 -beta", mode="vector", limit=50)
    assert result.ids and "it5" not in result.ids
    assert all("beta" not in hit.text.split() for hit in result.hits)
    assert any("full-text index unusable" in n for n in result.notes), result.notes
    kb.close()


def test_a_prefix_is_looked_for_while_the_text_index_is_unusable(store: Path) -> None:
    """`item5*` with the text index failing under the search: the stored items are read for
    the prefix (a substring), not searched for no word at all."""
    kb = open_kb(store)
    assert kb.search("item5", mode="fts").ids[:1] == ["it5"]  # the text index is open
    path = largest(store, "*.fast")
    overwrite(path, path.stat().st_size, 0)
    result = kb.search("item5*", mode="fts", limit=20)
    assert any("full-text index unusable" in n for n in result.notes), result.notes
    assert result.ids and all(hit.text.startswith("item5") for hit in result.hits), result.ids
    kb.close()


@pytest.mark.parametrize("damage", ["fast 4 KB at the end", "matrix rows rolled", "index folder is a file"])
def test_the_cli_reports_and_repairs_without_a_traceback(store: Path, damage: str) -> None:
    DAMAGES[damage](store)
    env = {**os.environ, "HYBRIDKB_DB": str(store), "HYBRIDKB_EMBEDDER": f"hashing-{DIM}"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", "from hybridkb.cli import main; main()", *args], capture_output=True,
                              text=True, env=env, timeout=300)

    checked = cli("check")
    assert checked.returncode == 1 and "problem:" in checked.stdout, checked
    for mode in ("fts", "hybrid", "vector"):
        found = cli("search", "item5", "--mode", mode, "--json")
        assert found.returncode == 0, found
        assert "Traceback" not in found.stderr and "panicked" not in found.stderr, found.stderr
    repaired = cli("check", "--repair")
    assert repaired.returncode == 0 and "ok: no problems found" in repaired.stdout, repaired
    for out in (checked, repaired):
        assert "Traceback" not in out.stderr and "panicked" not in out.stderr, out.stderr


@pytest.mark.parametrize("damage", ["matrix rows rolled", "rowids rolled", "corpus 8 KB", "matrix truncated"])
def test_damage_under_an_open_vector_base_is_seen_before_the_next_search(store: Path, damage: str) -> None:
    """A file of the open generation rewritten or cut short: the next search stats the mapped
    files, finds one changed, opens the generation again (its checksums fail) and rebuilds
    it, instead of answering from the changed map (or dying of SIGBUS on a cut one)."""
    kb = open_kb(store)
    assert kb.search(text_of(5), mode="vector", corpus="c").ids[:1] == ["it5"]
    DAMAGES[damage](store)
    time.sleep(verify.RECHECK_S)  # the mapped files are looked at again at most this often
    notes = answers_right(kb)
    assert any("vector index is damaged" in n and "rebuilt" in n for n in notes), notes
    assert kb.check()["ok"]
    kb.close()


def _merge_meanwhile(folder: Path) -> None:
    """What a commit or merge of the text index does to the files (the store's own text
    sync, another process): the segments' data under new segment ids, meta.json rewritten
    to list them, the old files removed."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    for seg in meta["segments"]:
        old, new = seg["segment_id"].replace("-", ""), uuid.uuid4()
        for path in folder.glob(f"{old}.*"):
            path.rename(folder / (new.hex + path.name[len(old):]))
        seg["segment_id"] = str(new)
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def test_a_commit_while_the_text_index_is_checked_is_not_damage(
        store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = index_dir(store) / "text"
    listed_once: list[bool] = []
    real = verify.segment_files

    def segment_files(at: Path) -> tuple[list[str], list[str]]:
        listing = real(at)
        if not listed_once:  # the files listed are gone before they are read
            listed_once.append(True)
            _merge_meanwhile(at)
        return listing

    monkeypatch.setattr(verify, "segment_files", segment_files)
    assert verify.text_problems(folder, None, full=True) == []
    assert listed_once
    with open_kb(store) as kb:
        assert kb.check()["ok"]
        answers_right(kb)
    overwrite(largest(store, "*.term"), 4096, 0)  # damage is still found
    assert any("checksum" in p for p in verify.text_problems(folder, None, full=True))
