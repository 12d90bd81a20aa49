"""The vector base's generations on disk: a new measurement of the same items adds a small
file, not a matrix; a superseded generation goes once the next is published; what a killed
process left goes at the next open. The index folder never holds more than the live
generation once a build is done."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.storage import asked
from hybridkb.storage.indexes import vector_base

DIM = 32
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")


class LookupEmbedder(HashingEmbedder):
    """Queries named "q<k>" embed as row k of a given matrix (the hashing model's id)."""

    def __init__(self, queries: np.ndarray) -> None:
        super().__init__(queries.shape[1])
        self.queries = queries

    def embed_query(self, text: str) -> np.ndarray:
        return self.queries[int(text[1:])]


def clustered(n: int, seed: int, spread: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    middle = np.random.default_rng(3).standard_normal((40, DIM))
    m = middle[rng.integers(0, 40, n)] + spread * rng.standard_normal((n, DIM))
    out: np.ndarray = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)
    return out


def items(vectors: np.ndarray, prefix: str = "v") -> list[dict[str, object]]:
    return [{"id": f"{prefix}{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)]


def folder_of(db: Path) -> Path:
    return db.with_name(db.name + ".idx") / "vectors"


def on_disk(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def live(kb: KnowledgeBase, folder: Path) -> Path:
    row = kb.backend._changes.published("vectors", fresh=True)
    assert row is not None
    return folder / vector_base.split_generation(row[0])[0]


def test_a_new_measurement_adds_to_the_generation_and_keeps_its_matrix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asked, "FLUSH", 10**6)  # kept only by flush()
    db = tmp_path / "kb.db"
    queries = clustered(120, seed=2, spread=1.6)
    with hybridkb.open(str(db), embedder=LookupEmbedder(queries), vector_ann="codes") as kb:
        kb.add_many(items(clustered(3000, seed=1)))
        kb.optimize()
        generation = live(kb, folder_of(db))
        matrix = generation / "matrix.i8"
        written = matrix.stat().st_mtime_ns, matrix.stat().st_ino
        builds = kb.backend._vectors.builds
        for k in range(60):
            assert kb.search(f"q{k}", mode="vector", limit=3).hits
        kb._asked.flush()
        report = kb.optimize()
        assert report["measured_on_asked"] == 60 and report["vector_base_built"]
        assert kb.backend._vectors.builds == builds and kb.backend._vectors.measurements == 1
        assert live(kb, folder_of(db)) == generation
        assert (matrix.stat().st_mtime_ns, matrix.stat().st_ino) == written
        assert sorted(p.name for p in generation.glob("measured-*")) == ["measured-1.json"]
        hits = kb.search("q100", mode="vector", limit=3).hits
    # Another process opens the measured generation as recorded.
    with hybridkb.open(str(db), embedder=LookupEmbedder(queries), vector_ann="codes") as kb:
        assert kb.optimize()["measured_on_asked"] == 60
        assert [h.id for h in kb.search("q100", mode="vector", limit=3).hits] == [h.id for h in hits]
        assert [p.name for p in folder_of(db).iterdir() if p.is_dir()] == [generation.name]


def test_rebuilds_in_one_process_never_leave_more_than_the_live_generation(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    m = clustered(2000, seed=1)
    with hybridkb.open(str(db), embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items(m))
        other = hybridkb.open(str(db), embedder=HashingEmbedder(DIM))  # holds a generation open
        try:
            assert other.search("item 1", mode="vector", limit=5).hits
            sizes = []
            for round_ in range(4):
                kb.backend._vectors.build_now(DIM)
                kb.add_many(items(clustered(50, seed=10 + round_), prefix=f"r{round_}-"))
                kb.backend._vectors.build_now(DIM)
                folder = folder_of(db)
                generations = [p for p in folder.iterdir() if p.is_dir()]
                assert generations == [live(kb, folder)]
                sizes.append(on_disk(folder))
                assert sizes[-1] == on_disk(generations[0]) + (folder / "build.lock").stat().st_size
            # The other connection's open generation was unlinked under it: still readable,
            # and its next search moves to the newest.
            assert other.backend._vectors._base is not None
            assert float(np.asarray(other.backend._vectors._base.matrix[0]) @ m[0]) > 0.99
            assert other.search("item 1", mode="vector", limit=5).hits
            assert other.backend._vectors._base_key == kb.backend._changes.published("vectors", fresh=True)
            assert kb.backend._vectors.builds >= 8 and other.backend._vectors.builds == 0
            assert max(sizes) <= min(sizes) * 1.2  # 2,000 to 2,200 vectors: no stale copy
        finally:
            other.close()


_BUILD_FOREVER = """
import sys, numpy as np, hybridkb
from hybridkb import HashingEmbedder
from hybridkb.storage.indexes import vector_base
m = np.random.default_rng(3).standard_normal((20_000, 32)).astype(np.float32)
kb = hybridkb.open(sys.argv[1], embedder=HashingEmbedder(32), vector_ann="codes")
kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i]} for i in range(len(m))])
print("loaded", flush=True)
slow = vector_base._build
def crawling(*args, **kwargs):
    written = slow(*args, **kwargs)
    print("building", flush=True)  # its temporary folder written, not yet sealed nor renamed
    import time
    time.sleep(1.0)
    return written
vector_base._build = crawling
while True:
    kb.backend._vectors.build_now(32)
"""


def test_a_build_killed_midway_leaves_nothing_after_the_next_open(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    proc = subprocess.Popen([sys.executable, "-c", _BUILD_FOREVER, str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "loaded", proc.stderr.read() if proc.stderr else ""
        for _ in range(3):  # the third build under way: its temporary folder exists
            assert proc.stdout.readline().strip() == "building"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    folder = folder_of(db)
    leftovers = [p.name for p in folder.iterdir() if p.is_dir()]
    assert any(name.endswith(".tmp") for name in leftovers), leftovers
    # A generation renamed into place but never recorded (killed between the two), too.
    with hybridkb.open(str(db), embedder=None) as kb:
        current = live(kb, folder)
    orphan = folder / "g000000000001-deadbeef"
    orphan.mkdir()
    (orphan / "matrix.i8").write_bytes(b"\0" * 4096)
    with hybridkb.open(str(db), embedder=HashingEmbedder(32), vector_ann="codes") as kb:
        assert kb.search("item 7", mode="vector", limit=3).hits
        assert [p.name for p in folder.iterdir() if p.is_dir()] == [current.name]
        assert kb.backend._vectors.builds == 0  # the recorded generation answered
        assert kb.check()["ok"]


def test_the_open_leaves_a_build_under_way_alone(tmp_path: Path) -> None:
    """Another process building (it holds the build lock): its temporary folder stays."""
    db = tmp_path / "kb.db"
    with hybridkb.open(str(db), embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items(clustered(500, seed=1)))
    folder = folder_of(db)
    busy = folder / "g000000000099-cafecafe.tmp"
    busy.mkdir()
    from hybridkb.storage.indexes.sync import _file_lock

    with _file_lock(folder / "build.lock"):
        code = ("import sys, hybridkb\nfrom hybridkb import HashingEmbedder\n"
                "kb = hybridkb.open(sys.argv[1], embedder=HashingEmbedder(32))\n"
                "assert kb.search('item 3', mode='vector').hits\nkb.close()\n")
        subprocess.run([sys.executable, "-c", code, str(db)], check=True, timeout=120)
        assert busy.is_dir()
    with hybridkb.open(str(db), embedder=HashingEmbedder(DIM)) as kb:
        assert kb.search("item 3", mode="vector").hits
    assert not busy.exists()
