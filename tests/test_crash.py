"""Crashes: a writer killed with SIGKILL at random moments loses nothing it reported as
written and leaves nothing half-written.

Each round starts `kb_worker.py import` on one store (a fresh one every 20 rounds),
waits until it is writing,
kills it after a random (seeded) delay and then checks the store: SQLite's and FTS5's
integrity checks pass, items / FTS rows / vectors agree, every batch is either all
there (at one version) or not at all, every batch the child reported is present and
findable by full-text and vector search, and the store takes new writes.
`--slow` runs more rounds.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import kb_worker
import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

WORKER = str(Path(__file__).with_name("kb_worker.py"))
SEED = 20240601
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")


def start(*args: str) -> subprocess.Popen[str]:
    """Start a worker and wait for its `ready` line (the store is open)."""
    proc = subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        watchdog.cancel()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"worker did not start: {line!r}\n{err}")
    return proc


def kill_after(proc: subprocess.Popen[str], delay: float) -> list[str]:
    """SIGKILL the worker after `delay` seconds; its complete output lines."""
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"worker ended by itself ({proc.returncode}):\n{err}"
    return [line for line in out.split("\n")[:-1]]  # the last piece may be cut mid-line


def kill_after_lines(proc: subprocess.Popen[str], n: int, prefix: str) -> list[str]:
    """SIGKILL the worker as soon as it has printed `n` lines starting with `prefix`."""
    assert proc.stdout is not None
    lines: list[str] = []
    seen = 0
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        while seen < n:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            seen += line.startswith(prefix)
        proc.send_signal(signal.SIGKILL)
    finally:
        watchdog.cancel()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"worker ended by itself ({proc.returncode}):\n{err}"
    return lines + out.split("\n")[:-1]


def rounds(request: pytest.FixtureRequest, default: int) -> int:
    return default * 5 if request.config.getoption("--slow") else default


def reported(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("ok ")]


def check_store(kb: KnowledgeBase, prefix: str, events: list[dict[str, Any]]) -> None:
    assert kb.backend.integrity_problems() == []
    stats = kb.stats()
    assert stats["items_without_vectors"] == 0, stats
    # every batch of this run is all there at one version, or not there at all
    by_batch: dict[int, list[Any]] = defaultdict(list)
    for item in kb.iter_items():
        if item.metadata.get("prefix") == prefix:
            by_batch[item.metadata["batch"]].append(item)
    for batch, items in by_batch.items():
        size = items[0].metadata["size"]
        assert len(items) == size, f"batch {batch}: {len(items)} of {size} items"
        assert len({it.metadata["version"] for it in items}) == 1, f"batch {batch} mixes versions"
    # every batch the child saw committed is there, at that version or a later one
    latest: dict[int, dict[str, Any]] = {}
    for event in events:
        latest[event["batch"]] = event
    for batch, event in latest.items():
        items = by_batch.get(batch, [])
        assert len(items) == event["size"], f"committed batch {batch} lost"
        assert items[0].metadata["version"] >= event["version"], f"committed rewrite of {batch} lost"
    # and findable: each batch by its token (FTS), some items by their own token and vector
    ids = [f"{prefix}b{b}i{j}" for b, e in latest.items() for j in range(e["size"])]
    assert len(kb.backend.vectors_for(ids)) == len(ids)
    for batch, event in latest.items():
        found = kb.search(kb_worker.token(prefix, "b", batch), mode="fts", corpora="crash",
                          limit=event["size"] + 5, dedup_threshold=None).ids
        assert sorted(found) == sorted(f"{prefix}b{batch}i{j}" for j in range(event["size"]))
    for item_id in ids[:: max(1, len(ids) // 10)]:
        batch, j = item_id.removeprefix(prefix + "b").split("i")
        tok = kb_worker.token(prefix, "b", batch, "i", j)
        assert kb.search(tok, mode="fts", corpora="crash").ids == [item_id], item_id
        assert item_id in kb.search(kb.get(item_id).text, mode="vector", limit=5, dedup_threshold=None).ids


def check_takes_writes(kb: KnowledgeBase, n: int) -> None:
    kb.add(f"probe number {n} after a crash", id=f"probe{n}", corpus="probe")
    assert kb.search(f"probe number {n}", corpora="probe", mode="fts").ids[0] == f"probe{n}"
    assert kb.delete(f"probe{n}")


def test_sigkill_during_bulk_import_loses_and_breaks_nothing(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    rng = random.Random(SEED)
    total_events = 0
    for n in range(rounds(request, 20)):
        db = str(tmp_path / f"crash{n // 20}.db")  # 20 crashes per store, then a fresh one
        proc = start("import", db, str(n), str(rng.randrange(2**31)))
        lines = kill_after(proc, rng.uniform(0.05, 0.6))
        events = reported(lines)
        total_events += len(events)
        kb = hybridkb.open(db, embedder=HashingEmbedder(64))
        try:
            check_store(kb, f"r{n}", events)
            check_takes_writes(kb, n)
        finally:
            kb.close()
    assert total_events > 20, "the kills landed before any write; the test proves nothing"


def test_sigkill_during_reembed_keeps_the_old_model_until_a_rerun_finishes(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    db = str(tmp_path / "reembed.db")
    rng = random.Random(SEED + 1)
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        kb.add_many([{"id": f"d{i}", "text": f"document {i} about {rng.choice(['cats', 'dogs', 'ships'])} "
                      + kb_worker.body(rng, 150)} for i in range(1500)])
    batches_before_kill = []
    for _ in range(rounds(request, 4)):
        proc = start("reembed", db, "32", "8")  # 1500 items: 188 batches, more than all rounds do
        lines = kill_after_lines(proc, rng.randint(1, 8), "batch")
        batches_before_kill.append(sum(line.startswith("batch") for line in lines))
        with hybridkb.open(db, embedder=HashingEmbedder(64)) as old:
            # not finished: the store still answers vector search for its old model
            assert old.embedder_name == "hashing-64@1"
            assert old.search("document 7 about", mode="vector").hits
            assert old.backend.integrity_problems() == []
            old.add("written during the switch by the old model", id=f"late{len(batches_before_kill)}")
        with hybridkb.open(db, embedder=HashingEmbedder(32)) as new:
            pending = new.stats()["reembed_pending"] == "hashing-32@1"
            with pytest.raises(hybridkb.EmbedderMismatchError,
                               match="finish switching" if pending else "switch it"):
                new.search("document", mode="vector")
    assert all(batches_before_kill), "a kill landed outside the re-embedding"
    with hybridkb.open(db, embedder=HashingEmbedder(32)) as new:
        resumed = new.reembed(batch_size=64)
        assert resumed < new.count()  # the pending vectors of the killed runs were kept
        assert new.embedder_name == "hashing-32@1" and new.backend.vector_dim() == 32
        assert new.stats()["items_without_vectors"] == 0
        assert new.backend.integrity_problems() == []
        assert new.search("written during the switch", mode="vector").hits[0].id.startswith("late")
        assert new.search("document 7 about dogs", mode="fts").ids
