"""A bulk write feeds SQLite's text index as it goes (indexes.sync.TextIndexSync.feeding).

`add_many` of many items leaves the tantivy index current when it returns, instead of
leaving the whole index to the first search. These tests hold it to the index's rules:
the same documents and scores as a rebuild from the items, other writers' commits taken
in, nothing lost when the load fails, is interrupted or is killed, and another process's
search seeing every batch the loader has committed. Real SQLite files, real tantivy
indexes; a second KnowledgeBase on a file has its own connection and index handle.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.errors import InvalidInputError
from hybridkb.model import Filters, now_ts
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import sync
from hybridkb.storage.indexes.text import TextIndex
from hybridkb.textquery import parse

WORKER = Path(__file__).with_name("kb_worker.py")
WORDS = "alpha beta gamma delta river stone cloud ledger kernel socket cache vector".split()


def open_kb(path: Path) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(32))


def items(n: int, *, start: int = 0, tag: str = "v0", seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"d{i}", "title": f"title {i % 7}",
             "text": f"tok{i} {tag} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))),
             "corpus": "a" if i % 3 else "b", "metadata": {"n": i}}
            for i in range(start, start + n)]


def log_head(kb: KnowledgeBase) -> int:
    row = kb.backend._read("SELECT seq FROM sqlite_sequence WHERE name = 'changes'")
    return int(row[0][0]) if row else 0


def text_hits(kb: KnowledgeBase, query: str, limit: int = 1000) -> list[tuple[str, float]]:
    area = SearchArea(corpora=None, filters=Filters(), now=now_ts())
    return kb.backend.text_search(parse(query), area, limit)


@pytest.fixture(autouse=True)
def small_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Feed from the first 50 items (2,000 by default) so that small stores exercise it."""
    monkeypatch.setattr(sync, "FEED_MIN", 50)


def test_a_bulk_load_is_indexed_when_add_many_returns(tmp_path: Path) -> None:
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(900), batch_size=64)
        text = kb.backend._text
        assert text.disk_seq() == log_head(kb)  # the index on disk holds every write
        fed = {q: text_hits(kb, q) for q in ("river stone", "tok17", "ledger kernel cache", "title 3")}
        assert all(fed.values())
        assert text.rebuilds == 1  # the index was created at the first chunk, then fed
    with open_kb(tmp_path / "kb.db") as other:  # another handle: nothing to catch up
        assert other.search("tok17", mode="fts").ids == ["d17"]
        assert other.backend._text.rebuilds == 0
        other.backend.rebuild_indexes()  # the same scores as an index built from the items
        for query, hits in fed.items():
            rebuilt = text_hits(other, query)
            assert [i for i, _ in rebuilt] == [i for i, _ in hits], query
            assert [s for _, s in rebuilt] == pytest.approx([s for _, s in hits], rel=1e-6)


def test_small_add_many_stays_on_the_delta(tmp_path: Path) -> None:
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(400), batch_size=64)
        kb.search("tok1", mode="fts")  # builds the index
        head = log_head(kb)
        kb.add_many(items(20, start=400), batch_size=8)  # under FEED_MIN: no chunk, no wait
        assert kb.backend._text.disk_seq() in (head, log_head(kb))  # a background commit may land
        assert kb.search("tok410", mode="fts").ids == ["d410"]


def test_a_bulk_rewrite_replaces_documents(tmp_path: Path) -> None:
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(300), batch_size=64)
        kb.upsert_many(items(300, tag="vnew", seed=2), batch_size=64)
        text = kb.backend._text
        assert text.disk_seq() == log_head(kb)
        index = text.current()
        assert index.doc_count() == 300  # one document per item, the old ones deleted
        assert len(text_hits(kb, "vnew")) == 300
        assert text_hits(kb, "v0") == []
        assert kb.check()["problems"] == []


@pytest.mark.parametrize("slow_commits", [False, True])
def test_writes_of_another_handle_between_batches_are_taken_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow_commits: bool) -> None:
    """`slow_commits`: a chunk ends after every batch and commits slowly, so batches are
    held for the next chunk with another handle's writes between them (one rewrites an
    item of a held batch): the index still ends as the log orders the changes."""
    if slow_commits:
        real_commit = TextIndex.commit

        def slow_commit(self: TextIndex, writer: Any, seq: int) -> None:
            time.sleep(0.1)
            real_commit(self, writer, seq)

        monkeypatch.setattr(TextIndex, "commit", slow_commit)
        monkeypatch.setattr(sync, "FEED_CHUNK_S", 0.0)
    db = tmp_path / "kb.db"
    with open_kb(db) as kb, open_kb(db) as other:
        written: list[str] = []

        def meanwhile(_count: int) -> None:  # another connection commits between two batches
            n = len(written)
            other.add(f"interloper{n} river", id=f"x{n}")
            if n == 3:
                other.delete("d5")
            if n == 5:  # an item of the batch before, rewritten by the other handle
                other.upsert("rewritten by the other handle", id="d300")
            written.append(f"x{n}")

        kb.add_many(items(700), batch_size=64, progress=meanwhile)
        text = kb.backend._text
        # every change but the last interloper's (one insert, after the last batch) is indexed;
        # with slow commits the other handle's background commit may have taken that one too
        assert text.disk_seq() in ((log_head(kb) - 1, log_head(kb)) if slow_commits else (log_head(kb) - 1,))
        rowids = {int(r[0]) for r in kb.backend._read("SELECT rowid FROM items")}
        assert set(text.current().all_rowids()) == rowids
        for n, item_id in enumerate(written):
            assert kb.search(f"interloper{n}", mode="fts").ids == [item_id]
        assert kb.search("tok5", mode="fts").ids == []
        assert kb.search("tok300", mode="fts").ids == []
        assert kb.search("rewritten", mode="fts").ids == ["d300"]


def test_a_failing_batch_keeps_what_was_committed_and_indexed(tmp_path: Path) -> None:
    bad = items(500)
    bad[300]["text"] = 42  # not text: add_many stops at this batch
    with open_kb(tmp_path / "kb.db") as kb:
        with pytest.raises(InvalidInputError):
            kb.add_many(bad, batch_size=50)
        assert kb.count() == 300
        assert kb.backend._text.disk_seq() == log_head(kb)
        assert kb.search("tok299", mode="fts").ids == ["d299"]
        assert kb.check()["problems"] == []


def test_an_interrupted_load_keeps_every_committed_batch_searchable(tmp_path: Path) -> None:
    def interrupt(_count: int) -> None:
        if kb.count() >= 256:
            raise KeyboardInterrupt

    with open_kb(tmp_path / "kb.db") as kb:
        with pytest.raises(KeyboardInterrupt):
            kb.add_many(items(900), batch_size=64, progress=interrupt)
        assert kb.count() == 256
        assert kb.backend._text.disk_seq() == log_head(kb)
        assert sorted(text_hits(kb, "title")) and len(text_hits(kb, "title")) == 256


def test_an_index_that_fails_to_commit_does_not_fail_the_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: TextIndex, writer: Any, seq: int) -> None:
        raise OSError("disk full (simulated)")

    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(100), batch_size=64)
        with monkeypatch.context() as patch:
            patch.setattr(TextIndex, "commit", refuse)
            kb.add_many(items(400, start=100), batch_size=64)  # no error: the store has them
        assert kb.count() == 500
        assert kb.search("tok450", mode="fts").ids == ["d450"]  # replayed from the log
        kb.backend._text.current()
        assert kb.check()["problems"] == []


def test_the_vector_base_is_built_while_the_last_commit_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load's two tails overlap: the vector base is built on the loading thread while
    the text index's last commit runs on its own, and both are done when add_many returns;
    a load that failed builds no base."""
    from hybridkb.storage.indexes.vectors import VectorIndexSync

    seen: list[tuple[str, bool]] = []
    real_commit, real_settle = TextIndex.commit, VectorIndexSync.settle
    committing = threading.Event()

    def slow_commit(self: TextIndex, writer: Any, seq: int) -> None:
        committing.set()
        time.sleep(0.2)
        real_commit(self, writer, seq)
        committing.clear()

    def settle(self: VectorIndexSync, dim: int) -> None:
        seen.append((threading.current_thread().name, committing.is_set()))
        real_settle(self, dim)

    monkeypatch.setattr(TextIndex, "commit", slow_commit)
    monkeypatch.setattr(VectorIndexSync, "settle", settle)
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(300), batch_size=64)
        assert seen == [(threading.current_thread().name, True)]
        assert kb.backend._text.disk_seq() == log_head(kb)
        assert kb.backend._vectors.builds == 1
        bad = items(200, start=300)
        bad[150]["text"] = 42
        with pytest.raises(InvalidInputError):
            kb.add_many(bad, batch_size=50)
        assert len(seen) == 1  # no base built after a failed load
        assert kb.backend._text.disk_seq() == log_head(kb)


def test_bulk_load_on_a_memory_store() -> None:
    with hybridkb.open(":memory:", embedder=HashingEmbedder(32)) as kb:
        kb.add_many(items(300), batch_size=64)
        assert kb.search("tok250", mode="fts").ids == ["d250"]


def _worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_another_process_sees_every_batch_the_loader_committed(tmp_path: Path) -> None:
    """The loader reports each batch after its commit; this process's next search must find
    all of it, whether the loader's writer has committed it to the index yet or not."""
    db = tmp_path / "kb.db"
    proc = _worker("bulk", str(db), "7", "6000", "50", "0.5")
    assert proc.stdout is not None
    checked = 0
    assert proc.stdout.readline().strip() == "ready"
    with open_kb(db) as kb:
        for line in proc.stdout:
            if not line.startswith("batch "):
                continue
            batch = json.loads(line.split(" ", 1)[1])
            if batch["index"] % 3:  # every third batch, while the loader goes on
                continue
            found = kb.search(f"tokr7b{batch['index']}", mode="fts", limit=batch["size"] + 5,
                              dedup_threshold=None).ids
            assert len(found) == batch["size"], f"batch {batch['index']}: {len(found)} of {batch['size']}"
            checked += 1
    assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    assert checked >= 5


def test_sigkill_during_a_bulk_load_loses_nothing_it_committed(tmp_path: Path) -> None:
    rng = random.Random(15)
    db = tmp_path / "kb.db"
    committed = 0
    for run in range(4):
        proc = _worker("bulk", str(db), str(run), "20000", "100", "0.5")
        assert proc.stdout is not None
        deadline = time.monotonic() + rng.uniform(0.5, 3.0)
        batches = []
        for line in proc.stdout:
            if line.startswith("batch "):
                batches.append(json.loads(line.split(" ", 1)[1]))
            if time.monotonic() > deadline:
                break
        proc.kill()
        proc.wait()
        committed += len(batches)
        with open_kb(db) as kb:
            assert kb.check()["problems"] == []
            for batch in batches[-3:]:
                found = kb.search(f"tokr{run}b{batch['index']}", mode="fts",
                                  limit=batch["size"] + 5, dedup_threshold=None).ids
                assert len(found) == batch["size"]
            index = kb.backend._text.current()
            rowids = {int(r[0]) for r in kb.backend._read("SELECT rowid FROM items")}
            assert set(index.all_rowids()) == rowids
    assert committed > 10, "the kills landed before any batch; the test proves nothing"


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rowids the text index reads back from the store from now on."""
    from hybridkb.storage.sqlite.changes import SQLiteChanges

    read: list[int] = []
    real = SQLiteChanges.text_docs

    def counting(self: SQLiteChanges, rowids: Any) -> Any:
        read.extend(rowids)
        return real(self, rowids)

    monkeypatch.setattr(SQLiteChanges, "text_docs", counting)
    return read


def test_fed_batches_are_never_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch goes to the index from the rows its INSERT returned: nothing of the load
    is read back from the store."""
    read = _reads(monkeypatch)
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(640), batch_size=64)
        assert kb.backend._text.disk_seq() == log_head(kb)
        assert read == []
        assert len(text_hits(kb, "title")) == 640


@pytest.mark.parametrize("hold", [sync.FEED_HOLD_MAX, 0])
def test_chunks_commit_while_the_load_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: int) -> None:
    """A chunk's commit runs on a thread of its own (tantivy lets go of the GIL): the
    documents of the batches written meanwhile are held for the next chunk (past
    FEED_HOLD_MAX they wait in the log and are replayed from it), and the last ones are in
    the index when add_many returns, scored as an index rebuilt from the rows."""
    monkeypatch.setattr(sync, "FEED_HOLD_MAX", hold)
    read = _reads(monkeypatch)
    held: list[int] = []
    real_take_held = sync.TextIndexSync._take_held

    def take_held(self: sync.TextIndexSync, feed: Any) -> None:
        held.append(feed.held_docs)
        real_take_held(self, feed)

    monkeypatch.setattr(sync.TextIndexSync, "_take_held", take_held)
    commits: list[str] = []
    real_commit = TextIndex.commit

    def slow_commit(self: TextIndex, writer: Any, seq: int) -> None:
        commits.append(threading.current_thread().name)
        time.sleep(0.05)  # a commit that waits for merges, as at a million items
        real_commit(self, writer, seq)

    monkeypatch.setattr(TextIndex, "commit", slow_commit)
    monkeypatch.setattr(sync, "FEED_CHUNK_S", 0.0)  # a chunk ends after every batch
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(1280), batch_size=64)
        assert kb.backend._text.disk_seq() == log_head(kb)
        assert "hybridkb-feed-commit" in commits  # chunks ended on their own thread
        if hold:
            assert sum(held) > 0, "no batch was written while a chunk committed: the test proves nothing"
            assert read == []  # every batch fed from what it wrote
        else:
            assert sum(held) == 0
            assert read, "no batch was written while a chunk committed: the test proves nothing"
            assert len(read) < 1280  # the others were fed as written
        # Whole lists (past a cut, ties could fall either side in another segment layout).
        fed = {q: text_hits(kb, q, 2000) for q in ("river stone", "tok17", "tok1279", "title 3")}
        assert len(text_hits(kb, "title", limit=2000)) == 1280
    with open_kb(tmp_path / "kb.db") as other:
        other.backend.rebuild_indexes()
        for query, hits in fed.items():
            rebuilt = text_hits(other, query, 2000)
            assert [i for i, _ in rebuilt] == [i for i, _ in hits], query
            assert [s for _, s in rebuilt] == pytest.approx([s for _, s in hits], rel=1e-6)


def test_a_chunk_replays_a_large_gap_into_its_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batches written while a chunk committed aside are replayed into the next chunk's
    writer, however many more than CATCH_UP_BATCH they are: committed in steps instead, each
    step left a small segment that every search then visited."""
    commits: list[int] = []
    real_commit = TextIndex.commit

    def slow_commit(self: TextIndex, writer: Any, seq: int) -> None:
        commits.append(seq)
        time.sleep(0.2)  # long enough for several batches to wait in the log
        real_commit(self, writer, seq)

    monkeypatch.setattr(TextIndex, "commit", slow_commit)
    monkeypatch.setattr(sync, "FEED_CHUNK_S", 0.0)  # a chunk ends after every batch
    monkeypatch.setattr(sync, "CATCH_UP_BATCH", 8)  # every gap is larger than a step
    monkeypatch.setattr(sync, "FEED_HOLD_MAX", 0)  # the batches written meanwhile: in the log
    read = _reads(monkeypatch)
    with open_kb(tmp_path / "kb.db") as kb:
        kb.add_many(items(1280), batch_size=64)
        assert read, "no batch waited in the log: the test proves nothing"
        steps = [b - a for a, b in itertools.pairwise(commits)]
        assert all(step > 8 for step in steps), steps  # no commit of one catch-up step
        assert kb.backend._text.disk_seq() == log_head(kb)
        assert len(text_hits(kb, "title", limit=2000)) == 1280


def test_fed_documents_filter_like_documents_rebuilt_from_the_rows(tmp_path: Path) -> None:
    """An inserted batch is fed from the items as given (not read back): every field a
    filter looks at must index exactly as a rebuild from the stored rows indexes it."""
    rng = random.Random(5)
    now = now_ts()
    values: list[Any] = ["x", "", "ü", 1, 1.0, 2.5, True, False, 0, None, [1], {"a": 1}, 2**40]
    batch = [{"id": f"m{i}", "text": f"meta{i} " + " ".join(rng.choice(WORDS) for _ in range(5)),
              "title": rng.choice([None, "", "héading"]), "corpus": rng.choice(["a", "b"]),
              "kind": rng.choice([None, "note", "decision"]), "scope": rng.choice([None, "s1", "s2"]),
              "repo": rng.choice([None, "r"]), "namespace": rng.choice([None, "n"]),
              "metadata": {"v": rng.choice(values), "w": rng.choice(values)},
              "created_at": now - rng.randint(0, 10_000), "stale": rng.random() < 0.2,
              **({"expires_at": now + rng.choice([-50, 5_000])} if rng.random() < 0.3 else {})}
             for i in range(400)]
    filters = [Filters(), Filters(include_expired=True, include_stale=True), Filters(kinds=("note",)),
               Filters(scope=("s1",), repo=("r",)), Filters(namespace=("n",), include_stale=True),
               Filters(created_after=now - 5_000), Filters(updated_before=now + 1),
               *[Filters(metadata=(("v", (v,)),), include_expired=True) for v in values[:9] if v is not None],
               Filters(metadata=(("w", (1, "x")),))]
    fed_path = tmp_path / "fed.db"
    with open_kb(fed_path) as fed:
        fed.add_many(batch, batch_size=100)
        assert fed.backend._text.rebuilds == 1  # fed, never rebuilt
        answers = [fed.search(" ".join(WORDS), mode="fts", limit=500, filters=f, corpus=c).ids
                   for f in filters for c in (None, "a")]
    with open_kb(fed_path) as again:
        again.backend.rebuild_indexes()
        rebuilt = [again.search(" ".join(WORDS), mode="fts", limit=500, filters=f, corpus=c).ids
                   for f in filters for c in (None, "a")]
    assert rebuilt == answers
    assert len({tuple(a) for a in answers}) > 5  # the filters do tell the items apart
