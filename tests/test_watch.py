"""`hybridkb index DIR --watch` in a real process: creations, edits, renames and deletions."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import hybridkb

pytest.importorskip("watchfiles")

SRC = str(Path(hybridkb.__file__).resolve().parents[1])


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _reader(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


def _expect(lines: queue.Queue[str], wanted: str, seen: list[str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        seen.append(line)
        if line.startswith(wanted):
            return
    raise AssertionError(f"no line starting {wanted!r}; saw {seen}")


def _texts(db: Path) -> dict[str, str]:
    kb = hybridkb.open(db, embedder=None)
    try:
        return {str(it.metadata["path"]): it.text for it in kb.iter_items()}
    finally:
        kb.close()


def test_watch_sees_create_edit_rename_and_delete(tmp_path: Path) -> None:
    root, db = tmp_path / "notes", tmp_path / "kb.db"
    root.mkdir()
    (root / "first.md").write_text("# First\n\nalready here\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hybridkb.cli import main; main()", "--db", str(db),
         "--embedder", "hashing-64", "index", str(root), "--corpus", "w", "--watch", "--debounce", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": SRC, "HYBRIDKB_PROGRESS": "0",
             "PYTHONFAULTHANDLER": "1"},
        # A suite started in the background (`pytest &`) ignores SIGINT, and children
        # inherit that: give the watcher Ctrl-C as a terminal would.
        preexec_fn=_default_sigint)
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    for stream, into in ((proc.stdout, out), (proc.stderr, err)):
        threading.Thread(target=_reader, args=(stream, into), daemon=True).start()
    seen: list[str] = []
    try:
        _expect(err, "watching", seen)
        assert any(line.startswith("indexed") for line in _drain(out, seen))
        (root / "new.md").write_text("# New\n\nthe heron waits\n")
        _expect(out, "added new.md (+1)", seen)
        assert "the heron waits" in _texts(db)["new.md"]
        (root / "new.md").write_text("# New\n\nthe heron flew off\n")
        _expect(out, "changed new.md (~1)", seen)
        assert "flew off" in _texts(db)["new.md"]
        (root / "new.md").rename(root / "moved.md")
        first = _first_of(out, seen, "added moved.md (+1)", "removed new.md (-1)")  # one batch or two
        _expect(out, "removed new.md (-1)" if first.startswith("added") else "added moved.md (+1)", seen)
        assert set(_texts(db)) == {"first.md", "moved.md"}
        (root / "moved.md").unlink()
        _expect(out, "removed moved.md (-1)", seen)
        assert set(_texts(db)) == {"first.md"}
        # a file past the size limit: said once, with the reason one-shot `index` gives
        (root / "big.md").write_text("# Big\n\n" + "a line of text\n" * 80_000)
        _expect(err, "skipped: big.md: larger than 1 MB", seen)
        (root / "later.md").write_text("# Later\n\nstill watching\n")
        _expect(out, "added later.md (+1)", seen)
        assert not any(line.startswith("skipped: big.md") for line in _drain(err, seen))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # say where it hangs: faulthandler dumps every thread
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=10)
            time.sleep(0.5)
            raise AssertionError("the watcher did not stop on Ctrl-C:\n" + "\n".join(err.queue)) from None
    assert proc.returncode == 0, list(err.queue)


def _drain(lines: queue.Queue[str], seen: list[str]) -> list[str]:
    got = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if got:
                break
            continue
        got.append(line)
        seen.append(line)
    return got


def _first_of(lines: queue.Queue[str], seen: list[str], *prefixes: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        seen.append(line)
        for prefix in prefixes:
            if line.startswith(prefix):
                return prefix
    raise AssertionError(f"none of {prefixes}; saw {seen}")
