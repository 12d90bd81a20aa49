"""python -m benchmarks.ingest_cpu [--items 100000] [--every 100000] [--lancedb]

Where `add_many`'s time goes: the benchmark's items (benchmarks/data.py, vectors given)
added to a fresh store with timers on the writing thread's stages (CPU time of that
thread, so other processes on a shared machine count for little), and per `--every` items
the wall time, the process's CPU and the writing thread's, all in us an item. The word-print
process's CPU is reported at the end. `--lancedb` then times LanceDB's ingest of the same
texts and vectors in the same process (benchmarks.peers), for a same-run ratio.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import hybridkb
from hybridkb import item_input
from hybridkb.embedding import get_embedder
from hybridkb.evaluation.cache import EmbeddingCache
from hybridkb.storage import records
from hybridkb.storage.indexes import sync
from hybridkb.storage.sqlite import backend, writes

from .data import DEFAULT_DATASETS, item_texts, item_vectors, load_data, make_items

spent: dict[str, float] = collections.defaultdict(float)


def _timed(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.thread_time() - started
    return wrapper


def _instrument() -> None:
    """Stages: item checks, the SQLite rows (write_rows, of which write_values), the text
    index's documents (feed, of which replays of batches left in the log)."""
    item_input.prepare = _timed("prepare", item_input.prepare)  # type: ignore[attr-defined]
    backend.write_rows = _timed("write_rows", backend.write_rows)  # type: ignore[attr-defined]
    writes.records.write_values = _timed("write_values", records.write_values)  # type: ignore[attr-defined]
    sync.TextIndexSync.feed = _timed("feed", sync.TextIndexSync.feed)  # type: ignore[method-assign]
    sync.TextIndexSync._replay = _timed("replay", sync.TextIndexSync._replay)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--lancedb", action="store_true")
    args = parser.parse_args()
    model = get_embedder("minilm")
    assert model is not None
    data = load_data(DEFAULT_DATASETS, model, n_queries=5, cache=EmbeddingCache())
    vectors = item_vectors(data, args.items)
    items = make_items(data, args.items, vectors)
    _instrument()
    folder = Path(tempfile.mkdtemp(prefix="hkb-ingest-cpu-"))
    try:
        kb = hybridkb.open(folder / "kb.db", embedder=model, sample_queries=False)
        done, last = 0, [time.perf_counter(), time.process_time(), time.thread_time(), 0]
        before: dict[str, float] = collections.defaultdict(float)

        def progress(count: int) -> None:
            nonlocal done
            done += count
            if done - last[3] >= args.every or done == args.items:
                now = [time.perf_counter(), time.process_time(), time.thread_time()]
                n = done - last[3]
                stages = " ".join(f"{k} {1e6 * (spent[k] - before[k]) / n:.0f}" for k in sorted(spent))
                print(f"{done:>9,} wall {1e6 * (now[0] - last[0]) / n:.0f} process "
                      f"{1e6 * (now[1] - last[1]) / n:.0f} writing thread {1e6 * (now[2] - last[2]) / n:.0f}"
                      f" | {stages} | load {os.getloadavg()[0]:.1f}", flush=True)
                last[:] = [*now, done]
                before.clear()
                before.update(spent)

        started = time.perf_counter()
        kb.add_many(items, progress=progress)
        seconds = time.perf_counter() - started
        kb.close()
        child = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"add_many: {seconds:.1f} s, {args.items / seconds:,.0f} items/s; word-print process "
              f"{1e6 * (child.ru_utime + child.ru_stime) / args.items:.0f} us an item (all us of CPU "
              "an item; stages on the writing thread)", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.lancedb:
        from .peers import LancePeer

        texts = item_texts(items)
        del items
        peer = LancePeer(folder / "lance")
        started = time.perf_counter()
        peer.ingest(texts, vectors)
        seconds = time.perf_counter() - started
        print(f"LanceDB {peer.version}: {seconds:.1f} s, {args.items / seconds:,.0f} items/s "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
