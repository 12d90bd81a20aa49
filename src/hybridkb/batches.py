"""add_many's loop: items prepared into batches, each batch written in one transaction.

On a large load (PRINTS_AHEAD_MIN items and more) a second process computes each batch's
word prints (print_worker.py) while this one writes the batch before it and prepares the
next, so the writing thread is spared a quarter of its work. A batch is then written one
batch late; when preparing an item fails (a bad item, a failing iterator), the batch
before it is written first, so every batch before the failing one is in the store, as
without the worker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import print_worker
from .model import Item

PRINTS_AHEAD_MIN = 5_000  # items into one add_many before the print worker starts
# add_many's batches when the caller names no size: BATCH items while the model embeds on
# the way (a progress report and a commit every 256); while nothing is to embed (vectors
# given, embedding deferred, no model) the first holds BATCH and each next one twice the
# last, up to LARGE_BATCH (a first batch of 10,000 left the writer idle while the print
# worker started: 10k items 7,076 -> 5,306 items/s). Each commit of a large load
# writes the id index's pages it touched, at random (ids in no order, as UUIDs are), to
# the WAL: ~256 of them for 256 items at 1M. Items-shaped rows, 1M inserts: 22.3 s in
# 256-row transactions, 17.8 in 1,024, 14.4 in 4,096, 12.1 in 10,000 (2026-11-29); the
# benchmark's items, 400k with vectors (load 3): 93.2 against 82.7 s, 2.65 against 1.95 GB
# written. A 10,000-item commit holds the write lock ~1.4 s; readers never wait for it.
BATCH = 256
LARGE_BATCH = 10_000

Prepared = tuple[Item, Any]  # an item ready to write, and its vector or None


def write_batches(
    items: Iterable[Any], prepare: Callable[[Any], Prepared],
    write: Callable[[list[Prepared], list[int] | None], list[str]],
    batch_limit: Callable[[Prepared], int], progress: Callable[[int], Any] | None, *,
    ramp_from: int | None = None, after_batch: Callable[[], None] = lambda: None,
) -> list[str]:
    """Prepare every item and write them in batches (`write(batch, prints)`, the prints None
    when the writer should compute them); the ids written, in order. A batch is written
    once it holds the fewest items any of its items allows (`batch_limit`); `ramp_from`:
    the first batch holds at most this many and each next one up to twice the last, so a
    load starts writing (and the print worker starts) as soon as with small batches.
    `after_batch` runs once a batch is complete (the store reads its vector size again)."""
    ids: list[str] = []
    worker: print_worker.PrintWorker | None = None
    ahead: list[Prepared] | None = None  # submitted to the worker, not yet written

    def write_ahead() -> None:
        nonlocal ahead
        if ahead is not None:
            batch, ahead = ahead, None
            assert worker is not None
            done(batch, write(batch, worker.collect()))

    def done(batch: list[Prepared], written: list[str]) -> None:
        ids.extend(written)
        if progress:
            progress(len(batch))

    try:
        batch: list[Prepared] = []
        ramp = sys.maxsize if ramp_from is None else ramp_from
        size = ramp  # the batch's limit: the least its items (and the ramp) allow
        prepared = 0
        source: Iterator[Any] = iter(items)
        while True:
            try:
                raw = next(source, _END)
                if raw is _END:
                    break
                batch.append(prepare(raw))
                size = min(size, batch_limit(batch[-1]))
            except BaseException:
                write_ahead()  # the batches before the failing one are written
                raise
            if len(batch) < size:
                continue
            prepared += len(batch)
            starting = worker is None and prepared >= PRINTS_AHEAD_MIN and print_worker.available()
            if starting:
                worker = print_worker.PrintWorker()
            write_ahead()
            if worker is not None and not worker.failed and not starting:
                worker.submit([item.text for item, _ in batch])
                ahead = batch
            else:  # a worker just started gets the next batch: it imports while this one is written
                done(batch, write(batch, None))
            if ramp_from is not None:
                ramp = 2 * len(batch)
            batch, size = [], ramp
            after_batch()
        write_ahead()
        if batch:
            done(batch, write(batch, None))
    finally:
        if worker is not None:
            worker.close()
    return ids


_END = object()
