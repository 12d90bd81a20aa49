"""A read-only or full index folder (issue 40, item 5): searches answer from the last
committed index plus the writes still in the store, with a note; writes commit to the store
and say the index lags (a logged warning); once the folder can be written again the indexes
catch up by themselves.

The folder is made read-only by a read-only bind mount and full by a small tmpfs, inside a
mount namespace of the worker's own (`unshare`: root, or a user namespace), so the test
works as root (where chmod stops nothing) and leaves no mount behind. Real SQLite, real
tantivy, real files; PostgreSQL keeps its indexes in the database (nothing to test here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("index_folder_worker.py")


def _unshare() -> list[str] | None:
    """A command prefix that gives the worker its own mount namespace, or None."""
    tool = shutil.which("unshare")
    if tool is None:
        return None
    for prefix in ([tool, "--map-root-user", "--mount"], [tool, "--mount"]):
        probe = subprocess.run([*prefix, "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return prefix
    return None


PREFIX = _unshare()
pytestmark = pytest.mark.skipif(
    PREFIX is None, reason="needs `unshare` with a mount namespace (root or user namespaces) "
                           "to mount a read-only or a small filesystem on the index folder")


def run(kind: str, folder: Path) -> dict[str, dict[str, Any]]:
    assert PREFIX is not None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([*PREFIX, sys.executable, str(WORKER), kind, str(folder)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "panicked" not in out.stderr, out.stderr[-3000:]
    return {s["step"]: s for s in map(json.loads, out.stdout.splitlines())}


@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_an_unwritable_index_folder_lags_then_catches_up(tmp_path: Path, kind: str) -> None:
    steps = run(kind, tmp_path)
    for mode in ("fts", "hybrid", "vector"):  # nothing to index yet: the committed index answers
        assert steps["before writes"][mode] == {"first": True, "notes": []}, steps["before writes"]
    assert steps["write"]["ok"], steps["write"]  # the store takes every write
    after = steps["after writes"]
    for mode in ("fts", "hybrid", "vector"):
        assert after[mode].get("first"), (mode, after)  # found: from the delta in the store
    for answer in (after["fts"], after["hybrid"], after["one"]):
        assert any("text index lags the store" in n for n in answer["notes"]), answer
    elsewhere = steps["first search elsewhere"]  # another process's first search says it too
    for mode in ("fts", "hybrid"):
        assert elsewhere[mode].get("first"), elsewhere
        assert any("text index lags the store" in n for n in elsewhere[mode]["notes"]), elsewhere
    cause = "cannot be written" if kind == "read-only" else "disk is full"
    assert any("cannot be updated" in w and cause in w for w in after["warnings"]), after["warnings"]
    check = steps["check"]
    assert not check["ok"] and any(cause in p["problem"] or cause in p["fix"]
                                   for p in check["problems"]), check
    recovered = steps["recovered"]
    for mode in ("fts", "hybrid", "vector"):
        assert recovered[mode] == {"first": True, "notes": []}, (mode, recovered)
    assert recovered["text_seq"] == recovered["head"], recovered  # committed, nothing lags
    assert recovered["check"], recovered
    assert any("can be updated again" in w for w in recovered["warnings"]), recovered["warnings"]
