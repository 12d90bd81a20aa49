"""SQLite's derived text index: the change log, catch-up, rebuilds, the delta, crashes.

Real SQLite files and real tantivy indexes beside them; a second KnowledgeBase on the same
file has its own connection and its own index handle, as another process would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.model import Filters, now_ts
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes.text import STATE_FILE
from hybridkb.textquery import parse

ITEMS = [{"id": f"n{i}", "text": f"note {i} about {'kafka' if i % 2 else 'redis'} queues",
          "kind": "lesson" if i % 3 else "decision"} for i in range(30)]


def open_kb(path: Path, **options: object) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(32), **options)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "kb.db"


def seqs(kb: KnowledgeBase) -> list[tuple[int, str]]:
    return [(r[0], r[1]) for r in kb.backend._read("SELECT seq, op FROM changes ORDER BY seq")]


def text_dir(kb: KnowledgeBase) -> Path:
    folder = kb.backend.index_dir
    assert folder is not None
    return folder / "text"


def test_every_committed_write_gets_a_sequence_number(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS[:3])
    assert [op for _, op in seqs(kb)] == ["i", "i", "i"]
    kb.upsert("changed text", id="n0")
    kb.delete("n1")
    ops = [op for _, op in seqs(kb)]
    assert ops[:3] == ["i"] * 3 and "u" in ops[3:] and ops[-1] == "d"
    before = seqs(kb)
    kb.search("changed", touch=True)  # touching is not a change to any index
    with pytest.raises(hybridkb.InvalidInputError):
        kb.add_many([{"id": "n9", "text": "x"}, {"id": "n2", "text": "dup"}])  # rolled back
    assert seqs(kb) == before
    kb.close()


def test_search_sees_writes_at_once_and_the_index_catches_up(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    assert len(kb.search("kafka", mode="fts", limit=50).hits) == 15
    kb.add("zookeeper ensemble", id="fresh")  # lands in the delta first
    assert kb.search("zookeeper", mode="fts").ids == ["fresh"]
    kb.delete("n1")
    assert "n1" not in kb.search("kafka", mode="fts", limit=50).ids
    index = kb.backend._text.current()
    assert index.seq == seqs(kb)[-1][0]
    assert sorted(index.all_rowids()) == sorted(kb.backend._changes.item_rowids())
    assert kb.backend.integrity_problems() == []
    kb.close()


def test_delta_scores_like_the_committed_index(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    kb.search("warm", mode="fts")
    sync = kb.backend._text
    sync._start_worker = lambda: None  # type: ignore[method-assign]  # no background commit
    kb.add_many([{"id": f"d{i}", "text": f"kafka streams partition {i} kafka"} for i in range(5)])
    area = SearchArea(None, Filters(), now_ts())
    before = kb.backend.text_search(parse("kafka partition"), area, 20)
    _index, delta = sync.view()
    assert len(delta) == 5
    sync.current()
    _, delta = sync.view()
    assert len(delta) == 0
    after = kb.backend.text_search(parse("kafka partition"), area, 20)
    # The new documents rank first and score as they do once committed (the committed
    # ones move a little: the commit adds the new documents to N and the frequencies).
    items = kb.backend.items_by_key([k for k, _ in before + after])  # lists name items by rowid
    assert ([items[k].id for k, _ in before][:5] == [items[k].id for k, _ in after][:5]
            == [f"d{i}" for i in range(5)])
    assert [s for _, s in before][:5] == pytest.approx([s for _, s in after][:5], rel=0.02)
    assert {i for i, _ in before} == {i for i, _ in after}
    kb.close()


def test_another_connections_commit_is_visible_to_the_next_search(db: Path) -> None:
    a, b = open_kb(db), open_kb(db)
    a.add_many(ITEMS)
    assert len(b.search("redis", mode="fts", limit=50).hits) == 15
    b.add("memcached slab allocator", id="from-b")
    assert a.search("memcached", mode="fts").ids == ["from-b"]
    a.delete("from-b")
    assert b.search("memcached", mode="fts").ids == []
    a.close()
    b.close()


def test_another_process_commit_is_visible(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    assert kb.search("etcd", mode="fts").ids == []
    code = ("import hybridkb, sys; kb = hybridkb.open(sys.argv[1], embedder=hybridkb.HashingEmbedder(32)); "
            "kb.add('etcd raft log', id='child'); "
            "print(kb.search('etcd raft', mode='fts').ids); kb.close()")
    out = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['child']"
    assert kb.search("etcd", mode="fts").ids == ["child"]
    kb.close()


@pytest.mark.parametrize("damage", ["missing", "corrupt", "foreign store", "other format", "state behind"])
def test_unusable_index_is_rebuilt_from_the_items(db: Path, damage: str) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    expected = kb.search("kafka queues", mode="fts", limit=50).ids
    kb.backend._text.current()
    kb.close()
    folder = db.with_name(db.name + ".idx") / "text"
    state = json.loads((folder / STATE_FILE).read_text())
    if damage == "missing":
        shutil.rmtree(folder)
    elif damage == "corrupt":
        (folder / "meta.json").write_text("{ damaged")
    elif damage == "foreign store":
        (folder / STATE_FILE).write_text(json.dumps({**state, "store": "someone-else"}))
    elif damage == "other format":
        (folder / STATE_FILE).write_text(json.dumps({**state, "schema": 0}))
    else:  # a crash after the tantivy commit but before the state file was written
        (folder / STATE_FILE).write_text(json.dumps({**state, "seq": 3}))
    again = open_kb(db)
    if damage in ("corrupt", "foreign store", "other format"):
        assert [p for p in again.backend.integrity_problems() if p.startswith("text index")]
    # the same hits (a replay leaves deleted documents in tantivy's statistics until its
    # segments merge, so tied scores may order differently)
    assert sorted(again.search("kafka queues", mode="fts", limit=50).ids) == sorted(expected)
    assert again.backend._text.rebuilds == (0 if damage == "state behind" else 1)
    index = again.backend._text.current()
    assert sorted(index.all_rowids()) == sorted(again.backend._changes.item_rowids())  # no duplicates
    assert again.backend.integrity_problems() == []
    again.close()


def test_integrity_reports_an_index_that_disagrees_and_repair_rebuilds(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    index = kb.backend._text.current()
    rowid = kb.backend._read("SELECT rowid FROM items WHERE id = 'n4'")[0][0]
    index.apply([], [rowid], seq=index.seq)  # lose one document behind the log's back
    assert kb.backend.integrity_problems() == ["1 items missing from the text index"]
    assert "n4" not in kb.search("redis", mode="fts", limit=50).ids
    kb.backend.rebuild_indexes()
    assert kb.backend.integrity_problems() == []
    assert "n4" in kb.search("redis", mode="fts", limit=50).ids
    kb.close()


def test_filters_apply_to_delta_documents_too(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    kb.search("warm", mode="fts")
    kb.backend._text._start_worker = lambda: None  # type: ignore[method-assign]
    kb.add_many([{"id": "x1", "text": "kafka lesson", "kind": "lesson"},
                 {"id": "x2", "text": "kafka decision", "kind": "decision", "corpus": "other"}])
    assert len(kb.backend._text.view()[1]) == 2
    found = kb.search("kafka", mode="fts", limit=50, filters={"kind": "decision"}, corpora=["default"]).ids
    assert "x2" not in found and "x1" not in found and found
    assert kb.search("kafka decision", mode="fts", corpora=["other"]).ids == ["x2"]
    kb.close()


def test_memory_store_has_an_index_in_memory() -> None:
    kb = hybridkb.open(":memory:", embedder=HashingEmbedder(32))
    kb.add_many(ITEMS)
    assert len(kb.search("kafka", mode="fts", limit=50).hits) == 15
    kb.delete("n1")
    assert len(kb.search("kafka", mode="fts", limit=50).hits) == 14
    assert kb.backend.index_dir is None
    kb.close()


def test_the_log_is_pruned_behind_both_indexes_and_they_still_catch_up(db: Path) -> None:
    kb = open_kb(db)
    kb.add_many(ITEMS)
    kb.search("kafka", limit=5)  # both indexes built
    kb.backend._text.current()
    kb.backend._writes_since_prune = 999
    kb.add_many([{"id": "after", "text": "prometheus alerting rules"}])
    oldest, head = kb.backend._changes.log_bounds()
    assert 30 < oldest <= head  # the first 30 inserts are gone from the log
    assert kb.search("prometheus", mode="fts").ids == ["after"]
    assert kb.backend.integrity_problems() == []
    other = open_kb(db)  # a fresh handle reopens the indexes and reads the rest of the log
    assert other.search("prometheus", mode="fts").ids == ["after"]
    other.close()
    kb.close()


def test_searches_name_the_right_items_after_every_write(db: Path) -> None:
    # Retrievals name items by rowid until the pipeline reads them: a rowid freed by a
    # delete and taken by a later item (SQLite reuses the largest) must read as the new item.
    kb = open_kb(db)
    kb.add_many(ITEMS)
    kb.upsert("note 3 rewritten about kafka", id="n3")
    kb.delete("n4")
    kb.delete_many(["n5", "n6"])
    last = max(ITEMS, key=lambda it: int(it["id"][1:]))["id"]
    kb.delete(last)
    kb.add("a new note about kafka", id="late")  # takes the deleted item's rowid
    other = open_kb(db)  # another handle's writes reach this one through the log
    other.delete("n7")
    other.add("kafka note written elsewhere", id="elsewhere")
    other.close()
    hits = kb.search("kafka", mode="fts", limit=50).hits
    ids = [h.id for h in hits]
    assert "elsewhere" in ids and "late" in ids
    assert not {"n4", "n5", "n6", "n7", last} & set(ids)
    assert next(h for h in hits if h.id == "late").text == "a new note about kafka"
    assert next(h for h in hits if h.id == "n3").text == "note 3 rewritten about kafka"
    # Migration 007 dropped the rowid -> id copy the searches no longer read.
    assert not kb.backend._read("SELECT name FROM sqlite_master WHERE name LIKE 'item_keys%'")
    assert kb.backend.integrity_problems() == []
    kb.close()


def test_the_index_folder_ignores_itself_in_git(tmp_path: Path) -> None:
    """README's first command inside a git work tree: `git status` shows the store file, never
    its derived index folder (it holds a `.gitignore` of `*`)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    from click.testing import CliRunner

    from hybridkb.cli import cli

    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "--embedder", "hashing-32", "demo"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "demo.db.idx" / ".gitignore").read_text() == "*\n"
    assert (tmp_path / "demo.db.idx" / "text").is_dir() and (tmp_path / "demo.db.idx" / "vectors").is_dir()
    status = subprocess.run([git, "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert "demo.db.idx" not in status and "demo.db" in status
