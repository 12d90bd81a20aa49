"""Folder indexing as a user runs it: text first, Ctrl-C, dry runs, roots, bad files, formats.

Real files, real stores, and for interrupts and watching a real `hybridkb` process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.cli import cli
from hybridkb.ingest import CorpusRootError, index_folder

SRC = str(Path(hybridkb.__file__).resolve().parents[1])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC, "HYBRIDKB_PROGRESS": "0"}


def _hybridkb(*args: str) -> list[str]:
    return [sys.executable, "-c", "from hybridkb.cli import main; main()", *args]


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[KnowledgeBase]:
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(64))
    yield kb
    kb.close()


def _invoke(*args: str, db: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), "--embedder", "hashing-64", *args],
                                env={"HYBRIDKB_PROGRESS": "0"})
    return result.exit_code, result.stdout, result.stderr


# -- text first, vectors behind -------------------------------------------------------------


def test_deferred_items_are_found_by_text_at_once_and_by_vector_after_embedding(kb: KnowledgeBase) -> None:
    kb.add("the heron waits by the millpond", id="sync")
    assert kb.stats()["awaiting_embedding"] == 0  # the Python API embeds with the write by default
    kb.add("a kingfisher dives for minnows", id="late", embed="defer")
    assert kb.stats()["awaiting_embedding"] == 1
    found = kb.search("kingfisher minnows", limit=5)
    assert found.ids[0] == "late"
    assert any("1 item(s) awaiting embedding" in note for note in found.notes)
    assert "late" not in kb.search("kingfisher minnows", mode="vector", limit=5).ids
    assert kb.embed_pending() == 1
    assert kb.stats()["awaiting_embedding"] == 0
    assert kb.search("kingfisher minnows", mode="vector", limit=1).ids == ["late"]
    assert not any("awaiting" in note for note in kb.search("kingfisher").notes)


def test_the_awaiting_note_counts_only_the_searched_corpora(kb: KnowledgeBase) -> None:
    kb.add_many([{"text": f"hidden heron {i}", "corpus": "secret"} for i in range(3)], embed="defer")
    kb.add("a visible heron", corpus="open", embed="defer")
    kb.add("another heron", corpus="open")
    notes = kb.search("heron", corpora=["open"]).notes
    assert any(n.startswith("1 item(s) awaiting embedding") for n in notes), notes
    assert any(n.startswith("4 item(s) awaiting embedding") for n in kb.search("heron").notes)
    assert kb.backend.ids_missing_vectors(10, []) == []  # no corpus searched: none waits
    kb.embed_pending()
    assert not any("awaiting" in n for n in kb.search("heron").notes)


def test_the_awaiting_note_stops_counting_past_a_thousand(kb: KnowledgeBase) -> None:
    kb.add_many([{"text": f"queued note {i}"} for i in range(1002)], embed="defer")
    assert any(n.startswith("over 1,000 item(s) awaiting embedding") for n in kb.search("queued").notes)


def test_defer_mode_of_a_store_and_an_unchanged_rewrite_keeps_its_vector(kb: KnowledgeBase) -> None:
    kb.embed_mode = "defer"
    kb.add_many([{"id": f"n{i}", "text": f"note number {i} about owls"} for i in range(5)])
    assert kb.awaiting_embedding() == 5
    batches = []
    assert kb.embed_pending(batch_size=2, progress=batches.append, stop=lambda: len(batches) >= 2) == 4
    assert batches == [2, 2] and kb.awaiting_embedding() == 1
    assert kb.embed_pending() == 1
    kb.upsert("note number 0 about owls", id="n0")  # same text: the vector stays valid
    kb.upsert("note number 1 about hawks", id="n1")  # new text: waits again
    assert kb.awaiting_embedding() == 1
    with pytest.raises(hybridkb.InvalidInputError, match="embed must be one of"):
        kb.add("x", embed="later")


def test_background_embedder_drains_the_queue(kb: KnowledgeBase) -> None:
    from hybridkb.background import BackgroundEmbedder

    kb.add_many([{"id": f"b{i}", "text": f"background item {i}"} for i in range(20)], embed="defer")
    with BackgroundEmbedder(kb, idle=0.05) as worker:
        deadline = time.monotonic() + 10
        while kb.awaiting_embedding() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert kb.awaiting_embedding() == 0 and worker.embedded == 20


def test_cli_embed_command(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    kb = hybridkb.open(db, embedder=HashingEmbedder(64), embed="defer")
    kb.add_many([{"text": f"queued {i}"} for i in range(7)])
    kb.close()
    code, out, _ = _invoke("stats", db=db)
    assert code == 0 and "awaiting embedding: 7 items" in out
    code, out, _ = _invoke("--json", "embed", db=db)
    assert code == 0 and json.loads(out)["embedded"] == 7 and json.loads(out)["awaiting_embedding"] == 0


# -- resumable, honest index ---------------------------------------------------------------


def _big_tree(root: Path, files: int = 600, functions: int = 12) -> None:
    for i in range(files):
        body = "\n\n".join(f"def func_{i}_{j}(x):\n    '''Thing {j} of module {i}.'''\n    return x * {j}\n"
                           for j in range(functions))
        _write(root, {f"pkg{i // 50}/mod{i}.py": body})


def _count(db: Path, *, writer_running: bool = False) -> int:
    """Items committed so far. Beside a running writer, a raw read-only peek, only once the
    store is in WAL mode (a reader holding a lock while the writer switches the journal mode
    could fail that writer) and 0 while it cannot read; otherwise through the store itself.
    (The stdlib's read-only connection once read "malformed" right after the writer closed
    and truncated the WAL, with the file intact: integrity ok, every item there.)"""
    if writer_running:
        if not Path(f"{db}-wal").exists():
            return 0
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])
        except sqlite3.DatabaseError:
            return 0
    if not db.exists():
        return 0
    with hybridkb.open(str(db), embedder=HashingEmbedder(64)) as kb:
        return kb.count()


def test_interrupted_index_keeps_finished_files_and_the_next_run_continues(tmp_path: Path) -> None:
    root, db = tmp_path / "tree", tmp_path / "kb.db"
    _big_tree(root)
    args = _hybridkb("--db", str(db), "--embedder", "hashing-64", "index", str(root), "--corpus", "t")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 60
    while _count(db, writer_running=True) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "run the same command again" in err
    kept = _count(db)
    assert 0 < kept < 7200, kept
    kb = hybridkb.open(db, embedder=HashingEmbedder(64))
    try:
        by_file: dict[str, list[int]] = {}
        for item in kb.iter_items():
            by_file.setdefault(item.metadata["path"], []).append(item.metadata["chunks"])
        assert all(len(v) == v[0] == 12 for v in by_file.values())  # never half a file
    finally:
        kb.close()
    again = subprocess.run(_hybridkb("--db", str(db), "--embedder", "hashing-64", "--json", "index",
                                     str(root), "--corpus", "t"),
                           capture_output=True, text=True, env=_env(), timeout=120)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["files_unchanged"] == len(by_file)  # the first run's files are not redone
    assert summary["files_changed"] == 600 - len(by_file)
    assert _count(db) == 7200 and summary["awaiting_embedding"] == 0


def test_dry_run_lists_changes_and_writes_nothing(tmp_path: Path) -> None:
    root, db = tmp_path / "r", tmp_path / "kb.db"
    _write(root, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n", "c.py": "def c():\n    return 1\n"})
    code, out, err = _invoke("index", str(root), "--corpus", "r", "--dry-run", db=db)
    assert code == 0
    assert "would add a.md (+1)" in out and "would add c.py (+1)" in out
    assert "would add 3 chunks, update 0, remove 0" in out
    assert "committed" not in err and "searchable" not in err and "embedded" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no store file, no index folder
    assert _invoke("index", str(root), "--corpus", "r", db=db)[0] == 0
    (root / "a.md").write_text("# A\n\nalpha, edited\n")
    (root / "b.md").unlink()
    (root / "d.md").write_text("delta\n")

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*"))
                if p.is_file() and not str(p.relative_to(tmp_path)).startswith("r")}

    before = snapshot()
    code, out, _ = _invoke("index", str(root), "--corpus", "r", "--dry-run", db=db)
    assert code == 0
    assert "would change a.md (~1)" in out and "would remove b.md (-1)" in out
    assert "would add d.md (+1)" in out and "c.py" not in out
    assert snapshot() == before  # not a byte of the store or its indexes written
    code, out, _ = _invoke("--json", "index", str(root), "--corpus", "r", "--dry-run", db=db)
    data = json.loads(out)
    assert data["dry_run"] is True
    assert {(c["path"], c["action"]) for c in data["changes"]} == {
        ("a.md", "changed"), ("b.md", "removed"), ("d.md", "added")}
    assert _count(db) == 3  # unchanged by the dry runs


def test_a_corpus_remembers_its_root_and_refuses_another_without_replace(tmp_path: Path) -> None:
    one, two, db = tmp_path / "one", tmp_path / "two", tmp_path / "kb.db"
    _write(one, {"a.md": "alpha\n"})
    _write(two, {"b.md": "beta\n"})
    assert _invoke("index", str(one), "--corpus", "c", db=db)[0] == 0
    code, _, err = _invoke("index", str(two), "--corpus", "c", db=db)
    assert code == 1 and f"mirrors {one.resolve()}" in err and "--replace" in err
    assert _count(db) == 1
    code, out, _ = _invoke("index", str(two), "--corpus", "c", "--replace", db=db)
    assert code == 0 and "1 removed" in out
    kb = hybridkb.open(db, embedder=None)
    try:
        assert [it.metadata["path"] for it in kb.iter_items()] == ["b.md"]
        assert kb.corpus_settings("c")["root"] == str(two.resolve())
    finally:
        kb.close()


def test_a_single_file_is_indexed_alone_or_within_its_corpus_folder(store: KnowledgeBase,
                                                                    tmp_path: Path) -> None:
    root = tmp_path / "r"
    _write(root, {"README.md": "# Read me\n\nhello\n", "docs/guide.md": "# Guide\n\nsteps\n"})
    alone = index_folder(store, root / "README.md", "readme")
    assert alone.chunks_added == 1 and store.get("readme:README.md#read-me").metadata["path"] == "README.md"
    index_folder(store, root, "repo")
    (root / "docs/guide.md").write_text("# Guide\n\nnew steps\n")
    one = index_folder(store, root / "docs/guide.md", "repo")
    assert (one.files_scanned, one.chunks_updated, one.chunks_removed) == (1, 1, 0)
    assert store.count("repo") == 2  # README.md was not removed
    with pytest.raises(CorpusRootError):
        index_folder(store, tmp_path, "repo")


def test_a_heading_only_file_is_indexed_reported_and_found(kb: KnowledgeBase, tmp_path: Path) -> None:
    root = tmp_path / "h"
    _write(root, {"zebra.md": "# Zebra quokka handling: the frobnicator_v9\n",
                  "other.md": "# Other\n\nSome unrelated body text about cats.\n"})
    summary = index_folder(kb, root, "notes")
    assert summary.chunks_added == 2
    assert [c.line() for c in summary.changes if c.path == "zebra.md"] == ["added zebra.md (+1)"]
    item = kb.get("notes:zebra.md#zebra-quokka-handling-the-frobnicator_v9")
    assert item.title == "zebra.md › Zebra quokka handling: the frobnicator_v9"
    assert item.metadata["heading"] == "Zebra quokka handling: the frobnicator_v9"
    for mode in ("fts", "hybrid"):
        assert kb.search("frobnicator_v9", mode=mode).hits[0].id == item.id


def test_cli_index_reports_a_heading_only_file(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _write(root, {"zebra.md": "# Zebra quokka handling: the frobnicator_v9\n"})
    code, out, _ = _invoke("index", str(root), "--corpus", "notes", db=tmp_path / "kb.db")
    assert code == 0 and "chunks 1 added" in out


# -- one bad file never stops a run (#13) ---------------------------------------------------


def test_bad_names_and_late_nul_bytes_are_skipped_and_the_rest_indexed(store: KnowledgeBase,
                                                                      tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write(root, {"good.md": "# Good\n\nfine text\n", "late.txt": "a" * 9000 + "\x00tail"})
    with open(os.fsencode(root) + b"/bad\xffname.md", "wb") as fh:
        fh.write(b"# bad name\n")
    summary = index_folder(store, root, "t")
    reasons = {s.path: s.reason for s in summary.skipped}
    assert reasons == {"bad\\xffname.md": "file name is not valid UTF-8",
                       "late.txt": "binary (NUL byte at offset 9000)"}
    assert store.count("t") == 1
    again = index_folder(store, root, "t")  # converges
    assert (again.files_unchanged, again.chunks_added, again.chunks_removed) == (1, 0, 0)


def test_cli_reports_bad_files_in_the_summary_and_json(tmp_path: Path) -> None:
    root, db = tmp_path / "t", tmp_path / "kb.db"
    _write(root, {"good.md": "fine\n", "late.txt": "a" * 9000 + "\x00"})
    with open(os.fsencode(root) + b"/bad\xffname.md", "wb") as fh:
        fh.write(b"x\n")
    code, out, _ = _invoke("--json", "index", str(root), "--corpus", "t", db=db)
    assert code == 0
    assert {(s["path"], s["reason"]) for s in json.loads(out)["skipped"]} == {
        ("bad\\xffname.md", "file name is not valid UTF-8"), ("late.txt", "binary (NUL byte at offset 9000)")}
    code, _, err = _invoke("index", str(root), "--corpus", "t", db=db)
    assert code == 0 and "skipped: late.txt: binary (NUL byte at offset 9000)" in err


def _index_as(uid: int | None, root: Path, db: Path) -> dict[str, object]:
    """index_folder in a forked child running as `uid` (permission bits do not stop root)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, index, report, exit without cleanup
        code = 0
        try:
            os.close(read)
            # Open and warm up (extension, codecs, lazy imports) first: the interpreter and
            # the venv may sit in folders only their owner can read (CI's mktemp venv, a
            # pyenv under /root); only the files to index are read after the drop.
            kb = hybridkb.open(db, embedder=HashingEmbedder(64))
            warm = root.parent / "warm"
            _write(warm, {"w.md": "# Warm\n\nup\n"})
            index_folder(kb, warm, "warm")
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            summary = index_folder(kb, root, "t")
            kb.close()
            os.write(write, json.dumps(summary.to_dict()).encode())
        except BaseException as exc:  # report anything to the parent
            os.write(write, json.dumps({"error": repr(exc)}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    out: dict[str, object] = json.loads(data)
    return out


def test_unreadable_folder_and_file_are_skipped(tmp_path: Path) -> None:
    """As root (tests often are), the indexing runs in a child that drops to an unprivileged uid."""
    base = Path(tempfile.mkdtemp(prefix="hkb-perm-", dir="/tmp"))
    try:
        root, db = base / "t", base / "db" / "kb.db"
        _write(root, {"good.md": "# Good\n\nreadable\n", "locked/inner.md": "hidden\n", "secret.md": "no\n"})
        db.parent.mkdir()
        for path in (base, root):
            path.chmod(0o755)
        db.parent.chmod(0o777)
        (root / "locked").chmod(0)
        (root / "secret.md").chmod(0)
        uid = 65534 if os.geteuid() == 0 else None  # `nobody`
        summary = _index_as(uid, root, db)
        assert "error" not in summary, summary
        assert {(s["path"], s["reason"]) for s in summary["skipped"]} == {  # type: ignore[attr-defined]
            ("locked/", "cannot list: Permission denied"), ("secret.md", "cannot read: Permission denied")}
        assert summary["chunks_added"] == 1
        again = _index_as(uid, root, db)  # converges: nothing to do, nothing removed
        assert (again["files_unchanged"], again["chunks_added"], again["chunks_removed"]) == (1, 0, 0)
    finally:
        for path in (base / "t" / "locked", base / "t" / "secret.md"):
            if path.exists():
                path.chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)


# -- sensible content ------------------------------------------------------------------------


def test_data_generated_and_vendored_files_are_skipped_with_reasons(store: KnowledgeBase,
                                                                   tmp_path: Path) -> None:
    root = tmp_path / "r"
    _write(root, {
        "app.py": "def run():\n    return 1\n", "package.json": '{"name": "x"}\n',
        "tokenizer.json": json.dumps({"vocab": {f"w{i}": i for i in range(5000)}}),
        "data.csv": "a,b\n" + "1,2\n" * 20000, "Cargo.lock": "[[package]]\n",
        "vendor/lib.py": "def lib():\n    pass\n", "dist/app.min.js": "var a=1;",
        "bundle.js": "var x=" + "1+" * 3000 + "1;\n", "notes.xyz": "custom notes\n",
    })
    summary = index_folder(store, root, "r")
    reasons = {s.path: s.reason for s in summary.skipped}
    assert reasons["tokenizer.json"].startswith("data file (JSON, ")
    assert reasons["data.csv"].startswith("data file (CSV, ")
    assert reasons["Cargo.lock"] == "lock file" and reasons["vendor/"] == "vendored folder"
    assert reasons["dist/app.min.js"] == "generated or minified file"
    assert reasons["bundle.js"] == "minified or generated (very long lines)"
    assert sorted({it.metadata["path"] for it in store.iter_items()}) == ["app.py", "package.json"]
    chosen = index_folder(store, root, "x", include=["*.xyz", "tokenizer.json"])
    assert chosen.skipped == [] and {it.metadata["path"] for it in store.iter_items()
                                     if it.corpus == "x"} == {"notes.xyz", "tokenizer.json"}
    assert store.get("x:notes.xyz#top").metadata["language"] == "text"


def test_html_text_keeps_its_lines_and_notebooks_chunk_by_cell(store: KnowledgeBase, tmp_path: Path) -> None:
    page = ("<html><head><title>T</title><style>p {color: red}</style></head>\n<body>\n"
            "<h1>Heron guide</h1>\n<script>var secret = 1;</script>\n<p>Herons &amp; egrets wade.</p>\n"
            "</body></html>\n")
    notebook = {"metadata": {"language_info": {"name": "python"}}, "cells": [
        {"cell_type": "markdown", "source": ["# Analysis\n", "We count owls.\n"]},
        {"cell_type": "code", "source": "def count_owls(n):\n    return n * 2\n"}]}
    _write(tmp_path / "r", {"page.html": page, "work.ipynb": json.dumps(notebook)})
    index_folder(store, tmp_path / "r", "r")
    html = [it for it in store.iter_items() if it.metadata["path"] == "page.html"]
    assert len(html) == 1 and "Herons & egrets wade." in html[0].text
    assert "secret" not in html[0].text and "color" not in html[0].text
    assert (html[0].metadata["start_line"], html[0].metadata["end_line"]) == (3, 5)
    cells = {it.title: it for it in store.iter_items() if it.metadata["path"] == "work.ipynb"}
    assert set(cells) == {"work.ipynb › cell 1 > Analysis", "work.ipynb › cell 2 > count_owls"}
    assert "return n * 2" in cells["work.ipynb › cell 2 > count_owls"].text
    assert store.search("count_owls", mode="fts").hits[0].title == "work.ipynb › cell 2 > count_owls"


def test_serve_embeds_the_queue_in_the_background(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    db = tmp_path / "served.db"
    with hybridkb.open(db, embedder=HashingEmbedder(64), embed="defer") as kb:
        kb.add_many([{"text": f"queued before the server started {i}"} for i in range(30)])
        assert kb.awaiting_embedding() == 30
    proc = subprocess.Popen(_hybridkb("--db", str(db), "--embedder", "hashing-64", "serve"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        deadline = time.monotonic() + 120  # generous: a loaded machine starts the server slowly
        waiting = 30
        while time.monotonic() < deadline and waiting:
            time.sleep(0.1)
            with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
                waiting = kb.awaiting_embedding()
        assert waiting == 0
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # end of the stdio session: the server stops its thread and exits
        proc.wait(timeout=30)
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        assert kb.search("queued server", mode="vector", limit=3).hits
