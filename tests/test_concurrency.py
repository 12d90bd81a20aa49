"""Concurrency: several processes (and threads) writing and reading one SQLite store.

WAL, a busy timeout and short IMMEDIATE write transactions mean: no write is lost, no
`database is locked` reaches the caller, and a reader never sees half of a batch (each
batch is one transaction). Bounded in time and seeded; `--slow` runs longer.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import kb_worker
import pytest

import hybridkb
from hybridkb import HashingEmbedder, HybridKBError

WORKER = str(Path(__file__).with_name("kb_worker.py"))
SEED = 7


def seconds(request: pytest.FixtureRequest, default: float) -> float:
    return default * 6 if request.config.getoption("--slow") else default


def spawn(*args: str, start_at: float | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, KB_WORKER_START_AT=str(start_at)) if start_at else None
    return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(procs: list[subprocess.Popen[str]], timeout: float) -> list[list[str]]:
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"worker {proc.args} did not finish in time:\n{err}")
        lines = out.splitlines()
        assert proc.returncode == 0 and not any(line.startswith("error") for line in lines), \
            f"worker {proc.args[2:]} failed:\n{out[-2000:]}\n{err[-4000:]}"
        assert "locked" not in err
        outputs.append(lines)
    return outputs


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "shared.db")
    with hybridkb.open(path, embedder=HashingEmbedder(64)) as kb:  # created before anyone races
        kb.add_many(kb_worker.batch_items("seed", 0, 1, 0, random.Random(SEED)))  # readers find something
    return path


def test_writers_and_readers_in_processes(db: str, request: pytest.FixtureRequest) -> None:
    rng = random.Random(SEED)
    duration = seconds(request, 3.0)
    writers = [spawn("writer", db, str(w), str(rng.randrange(2**31)), str(duration)) for w in range(3)]
    readers = [spawn("reader", db, str(r), str(rng.randrange(2**31)), str(duration)) for r in range(2)]
    writer_out = finish(writers, timeout=duration + 120)
    reader_out = finish(readers, timeout=duration + 120)

    # readers did real work and never saw a half-written batch (they fail loudly otherwise)
    for lines in reader_out:
        report = json.loads(next(line for line in lines if line.startswith("checked")).split(" ", 1)[1])
        assert report["searches"] > 5 and report["batches"] > 0, report

    # no lost writes: every batch a writer saw committed is there, at its last version
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        assert kb.backend.integrity_problems() == []
        expected = 1
        for w, lines in enumerate(writer_out):
            latest: dict[int, dict[str, Any]] = {}
            for line in lines:
                if line.startswith("ok "):
                    event = json.loads(line.split(" ", 1)[1])
                    latest[event["batch"]] = event
            assert latest, f"writer {w} wrote nothing"
            for batch, event in latest.items():
                kb_worker.check_batch(kb, {"prefix": f"w{w}", "batch": batch, "size": event["size"]})
                versions = {it.metadata["version"] for it in
                            kb.get_many([f"w{w}b{batch}i{j}" for j in range(event["size"])])}
                assert versions == {event["version"]}, (w, batch)
                expected += event["size"]
        assert kb.count() == expected
        assert kb.stats()["items_without_vectors"] == 0


def test_concurrent_access_counts_are_not_lost(db: str, request: pytest.FixtureRequest) -> None:
    times = int(seconds(request, 1.0) * 40)
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        kb.add("sharedtoken: one item everybody reads", id="sharedtoken", corpus="shared")
    procs = [spawn("toucher", db, "sharedtoken", str(times)) for _ in range(4)]
    finish(procs, timeout=120)
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        assert kb.get("sharedtoken").access_count == 4 * times


def test_threads_share_one_store(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    kb = hybridkb.open(str(tmp_path / "threads.db"), embedder=HashingEmbedder(64))
    errors: list[BaseException] = []
    written: list[int] = []
    rounds = int(seconds(request, 1.0) * 30)

    def writer(t: int) -> None:
        rng = random.Random(t)
        try:
            for b in range(rounds):
                written.append(len(kb.add_many(kb_worker.batch_items(f"t{t}", b, rng.randint(1, 8), 0, rng))))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader(t: int) -> None:
        rng = random.Random(100 + t)
        try:
            for _ in range(rounds):
                for hit in kb.search(kb_worker.body(rng, 2), limit=5, dedup_threshold=None).hits:
                    kb_worker.check_batch(kb, hit.metadata)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    threads += [threading.Thread(target=reader, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert kb.backend.integrity_problems() == []
    assert kb.count() == sum(written)
    kb.close()


def test_a_writer_blocked_longer_than_the_busy_timeout_gets_a_clear_error(tmp_path: Path) -> None:
    from hybridkb.storage.sqlite import backend as sqlite_backend

    path = str(tmp_path / "busy.db")
    holder = hybridkb.open(path, embedder=HashingEmbedder(64))
    other = hybridkb.open(path, embedder=HashingEmbedder(64))
    other.backend._conn.execute("PRAGMA busy_timeout = 100")  # instead of 30 s
    holder.backend._conn.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(HybridKBError, match="busy"):
            other.add("cannot get the write lock", id="x")
        assert other.search("anything", mode="fts").ids == []  # readers are not blocked (WAL)
    finally:
        holder.backend._conn.execute("ROLLBACK")
    other.add("now it can", id="x")
    assert holder.get("x").text == "now it can"
    assert sqlite_backend.BUSY_TIMEOUT_S >= 5
    holder.close()
    other.close()


def test_processes_racing_to_create_one_store(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh.db")
    rng = random.Random(SEED + 1)
    start_at = time.time() + 2.0  # every worker opens the new file at the same moment
    writers = [spawn("writer", path, str(w), str(rng.randrange(2**31)), "0.3", start_at=start_at)
               for w in range(5)]
    outputs = finish(writers, timeout=120)
    with hybridkb.open(path, embedder=HashingEmbedder(64)) as kb:
        assert kb.backend.integrity_problems() == []
        assert kb.embedder_name == "hashing-64@1" and kb.backend.vector_dim() == 64
        assert kb.count() == sum(json.loads(line.split(" ", 1)[1])["size"] for lines in outputs
                                 for line in lines if line.startswith("ok ")
                                 and json.loads(line.split(" ", 1)[1])["version"] == 0)
