"""Child processes for the crash and concurrency tests: `python kb_worker.py MODE TARGET ...`.

Each mode prints one line per event it wants the parent to know, flushed at once and
only after the write it reports has returned (committed). Any unexpected exception
is printed as `error ...` and the process exits with status 1.

  import TARGET RUN SEED          add (and sometimes re-write) batches until killed
  reembed TARGET DIM BATCH        re-embed the store with hashing-DIM, one line per batch
  writer TARGET WID SEED SECONDS  add and re-write batches of its own for SECONDS
  reader TARGET RID SEED SECONDS  search and check that no batch is ever half visible
  toucher TARGET ID TIMES         count one item as accessed TIMES times
  bulk TARGET RUN TOTAL BATCH CHUNK_S
                                  one add_many of TOTAL items that feeds the text index,
                                  one line per committed batch
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from typing import Any

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud "
         "market ledger kernel socket thread cache index vector billing deploy migrate").split()
DIM = 64


def say(*parts: object) -> None:
    print(*parts, flush=True)


def open_kb(target: str, dim: int = DIM) -> KnowledgeBase:
    """Open the store; at the epoch time in $KB_WORKER_START_AT if set (to race other workers)."""
    start_at = os.environ.get("KB_WORKER_START_AT")
    if start_at:
        time.sleep(max(0.0, float(start_at) - time.time()))
    return hybridkb.open(target, embedder=HashingEmbedder(dim))


def token(*parts: object) -> str:
    """One FTS token (letters and digits only) unique to what it names."""
    return "tok" + "x".join(str(p) for p in parts)


def body(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def batch_items(prefix: str, batch: int, size: int, version: int, rng: random.Random) -> list[dict[str, Any]]:
    """Items of one batch; every item names its batch, size and version in its metadata."""
    return [{
        "id": f"{prefix}b{batch}i{j}",
        "corpus": "crash",
        "title": f"batch {batch} item {j}",
        "text": f"{token(prefix, 'b', batch, 'i', j)} {token(prefix, 'b', batch)} v{version} "
                + body(rng, rng.randint(20, 400)),
        "metadata": {"prefix": prefix, "batch": batch, "size": size, "version": version},
    } for j in range(size)]


def run_import(target: str, run: str, seed: str) -> None:
    rng = random.Random(int(seed))
    kb = open_kb(target)
    prefix = f"r{run}"
    say("ready")
    versions: dict[int, int] = {}
    sizes: dict[int, int] = {}
    batch = 0
    while True:
        if versions and rng.random() < 0.25:  # re-write an earlier batch of this run in one go
            b = rng.choice(sorted(versions))
            versions[b] += 1
            kb.upsert_many(batch_items(prefix, b, sizes[b], versions[b], rng))
            say("ok", json.dumps({"batch": b, "size": sizes[b], "version": versions[b]}))
            continue
        size = rng.randint(1, 40)
        kb.add_many(batch_items(prefix, batch, size, 0, rng))
        versions[batch], sizes[batch] = 0, size
        say("ok", json.dumps({"batch": batch, "size": size, "version": 0}))
        batch += 1


def run_reembed(target: str, dim: str, batch: str) -> None:
    kb = open_kb(target, int(dim))
    say("ready")
    n = kb.reembed(batch_size=int(batch), progress=lambda k: say("batch", k))
    say("done", n)


def run_writer(target: str, wid: str, seed: str, seconds: str) -> None:
    rng = random.Random(int(seed))
    kb = open_kb(target)
    prefix = f"w{wid}"
    say("ready")
    deadline = time.monotonic() + float(seconds)
    versions: dict[int, int] = {}
    sizes: dict[int, int] = {}
    batch = 0
    while time.monotonic() < deadline:
        if versions and rng.random() < 0.3:
            b = rng.choice(sorted(versions))
            versions[b] += 1
            kb.upsert_many(batch_items(prefix, b, sizes[b], versions[b], rng))
            say("ok", json.dumps({"batch": b, "size": sizes[b], "version": versions[b]}))
        else:
            size = rng.randint(1, 20)
            kb.add_many(batch_items(prefix, batch, size, 0, rng))
            versions[batch], sizes[batch] = 0, size
            say("ok", json.dumps({"batch": batch, "size": size, "version": 0}))
            batch += 1
        time.sleep(rng.uniform(0, 0.01))


def check_batch(kb: KnowledgeBase, meta: dict[str, Any]) -> None:
    """A batch is written in one transaction: any one read sees all of it, at one version."""
    prefix, b, size = meta["prefix"], meta["batch"], meta["size"]
    ids = [f"{prefix}b{b}i{j}" for j in range(size)]
    items = kb.get_many(ids)
    if len(items) != size:
        raise AssertionError(f"half a batch visible: {len(items)} of {size} items of {prefix}b{b}")
    versions = {it.metadata["version"] for it in items}
    if len(versions) != 1:
        raise AssertionError(f"batch {prefix}b{b} seen at several versions at once: {versions}")
    found = kb.search(token(prefix, "b", b), mode="fts", limit=size + 5, dedup_threshold=None).ids
    if sorted(found) != sorted(ids):
        raise AssertionError(f"FTS sees {len(found)} of the {size} items of {prefix}b{b}")
    vectors = kb.backend.vectors_for(ids)
    if len(vectors) != size:
        raise AssertionError(f"{size - len(vectors)} items of {prefix}b{b} have no vector")


MIN_SEARCHES = 10


def run_reader(target: str, rid: str, seed: str, seconds: str) -> None:
    rng = random.Random(int(seed))
    kb = open_kb(target)
    kb.search("warm up", limit=1)  # the first search builds the derived indexes: not timed
    say("ready")
    deadline = time.monotonic() + float(seconds)
    checks = searches = 0
    # at least MIN_SEARCHES however slow a loaded machine makes each one (writers may be done)
    while time.monotonic() < deadline or searches < MIN_SEARCHES:
        mode = rng.choice(["hybrid", "fts", "vector"])
        result = kb.search(body(rng, rng.randint(1, 4)), mode=mode, limit=10, dedup_threshold=None)
        searches += 1
        for hit in result.hits[:3]:
            check_batch(kb, hit.metadata)
            checks += 1
    say("checked", json.dumps({"searches": searches, "batches": checks}))


def run_toucher(target: str, item_id: str, times: str) -> None:
    kb = open_kb(target)
    say("ready")
    for _ in range(int(times)):
        result = kb.search(item_id, mode="fts", touch=True, corpora="shared")
        if result.ids != [item_id]:
            raise AssertionError(f"shared item not found: {result.ids}")
    say("done")


def run_bulk(target: str, run: str, total: str, batch: str, chunk_s: str) -> None:
    """One add_many that feeds the text index (from 50 items on, committing every CHUNK_S);
    each item names its batch of the load (tokr<RUN>b<k>)."""
    from hybridkb.storage.indexes import sync

    sync.FEED_MIN, sync.FEED_CHUNK_S = 50, float(chunk_s)
    rng = random.Random(int(run))
    size = int(batch)
    items = [{"id": f"r{run}i{i}", "corpus": "bulk",
              "text": f"tokr{run}b{i // size} " + body(rng, rng.randint(5, 60))}
             for i in range(int(total))]
    kb = open_kb(target)
    say("ready")
    done = [0]

    def committed(count: int) -> None:
        say("batch", json.dumps({"index": done[0], "size": count}))
        done[0] += 1

    kb.add_many(items, batch_size=size, progress=committed)
    say("done")


MODES = {"import": run_import, "bulk": run_bulk, "reembed": run_reembed, "writer": run_writer, "reader": run_reader,
         "toucher": run_toucher}

if __name__ == "__main__":
    try:
        MODES[sys.argv[1]](*sys.argv[2:])
    except Exception as exc:
        say("error", repr(exc))
        traceback.print_exc()
        sys.exit(1)
