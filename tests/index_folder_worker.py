"""Run inside a mount namespace of its own (`unshare -rm`, tests/test_index_folder.py): a
store whose index folder becomes read-only (a read-only bind mount) or full (a small tmpfs
filled up), then writable again. Prints one JSON line per step; the test judges them.

    python index_folder_worker.py read-only|full FOLDER
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.storage.indexes import health

health.RETRY_S = 0.2  # the test waits for recovery: try again soon
N = 1000


def say(step: str, **facts: Any) -> None:
    print(json.dumps({"step": step, **facts}), flush=True)


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def probe(kb: KnowledgeBase, word: str, expected: str) -> dict[str, Any]:
    """Each mode's answer to `word` (expected first?) and the notes, or what it raised."""
    out: dict[str, Any] = {}
    for mode in ("fts", "hybrid", "vector"):
        try:
            query = word if mode != "vector" else kb.get(expected).text  # type: ignore[union-attr]
            found = kb.search(query, mode=mode, limit=3)
            notes = [n for n in found.notes if not n.startswith("no confident match")]  # the index's
            out[mode] = {"first": expected in found.ids[:1 if mode == "fts" else 3], "notes": notes}
        except BaseException as exc:
            out[mode] = {"raised": f"{type(exc).__name__}: {exc}"}
    return out


def settle(kb: KnowledgeBase) -> None:
    """Let the background commit that a write kicked finish (it fails, or it lands)."""
    for worker in (kb.backend._text._worker, kb.backend._vectors._worker):
        if worker is not None:
            worker.join(60)


def fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def main(kind: str, root: Path) -> None:
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("hybridkb").addHandler(handler)
    db = root / "kb.db"
    idx = root / "kb.db.idx"
    kb = hybridkb.open(str(db), embedder=HashingEmbedder(64))
    kb.add_many([{"id": f"it{i}", "text": f"item{i} plugh{i * 7919} sound"} for i in range(N)])
    kb.optimize()
    kb.close()
    if kind == "read-only":
        mount("--bind", str(idx), str(idx))
        mount("-o", "remount,bind,ro", str(idx))
    else:
        saved = root / "saved"
        shutil.move(idx, saved)
        idx.mkdir()
        mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(idx))
        shutil.copytree(saved, idx, dirs_exist_ok=True, symlinks=True)
        filler = fill(idx)
    kb = hybridkb.open(str(db), embedder=HashingEmbedder(64))
    say("before writes", **probe(kb, "item5", "it5"))
    try:
        kb.add_many([{"id": f"new{i}", "text": f"zebra{i} quux{i * 7919} fresh"} for i in range(3000)])
        kb.add("one more zebraone", id="one")
        say("write", ok=True)
    except BaseException as exc:
        say("write", ok=False, raised=f"{type(exc).__name__}: {exc}")
    settle(kb)
    say("after writes", **probe(kb, "zebra7", "new7"), one=probe(kb, "zebraone", "one")["fts"],
        warnings=warnings)
    other = hybridkb.open(str(db), embedder=HashingEmbedder(64))  # as another process would
    say("first search elsewhere", **probe(other, "zebraone", "one"))
    other.close()
    report = kb.check()
    say("check", ok=report["ok"], problems=report["problems"])
    if kind == "read-only":
        mount("-o", "remount,bind,rw", str(idx))
    else:
        os.remove(filler)
    time.sleep(health.RETRY_S * 2)
    kb.search("zebra7", mode="fts")  # tries again: commits the lag, or starts a build
    settle(kb)
    time.sleep(health.RETRY_S * 2)
    kb.search("zebra7", mode="hybrid")
    settle(kb)
    head = kb.backend._changes.log_bounds()[1]
    say("recovered", **probe(kb, "zebra7", "new7"), text_seq=kb.backend._text.disk_seq(), head=head,
        check=kb.check()["ok"], warnings=warnings)
    kb.close()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
