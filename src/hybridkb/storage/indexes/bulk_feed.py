"""The state of one bulk write feeding the text index (`TextIndexSync.feeding`, sync.py):
its open tantivy writer and the folder's lock, the chunk committing on a thread of its
own, and the batches written meanwhile, held for the next chunk's writer."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .text import TextIndex
from .text_schema import TextDoc

Batch = tuple[Sequence[TextDoc], int, int, bool]  # a fed batch: docs, first_seq, last_seq, replacing


@dataclass
class Feed:
    """A bulk write in progress on one thread."""

    thread: int
    waiting: int = 0  # items written but left to the log (before the first chunk)
    chunks: int = 0  # chunks opened so far
    failed: bool = False  # the index refused a batch: the rest is left to the log
    lock: contextlib.ExitStack | None = None  # the folder's lock, while a chunk is open
    index: TextIndex | None = None
    writer: Any = None  # tantivy's writer, holding every change up to `seq`
    seq: int = 0
    started: float = 0.0
    behind: int = 0  # the last change a batch written while a chunk was ending holds
    held: list[Batch] = field(default_factory=list)  # those batches, in order
    held_docs: int = 0
    holding: bool = True  # False once one went to the log: those after it go there too
    ending: tuple[threading.Thread, Feed] | None = None  # a chunk committing on a thread

    def hold(self, batch: Batch, limit: int) -> None:
        """Keep a batch written while a chunk commits, while the held ones stay within
        `limit` documents; past it, this one and the rest wait in the log."""
        self.holding = self.holding and self.held_docs + len(batch[0]) <= limit
        if self.holding:
            self.held.append(batch)
            self.held_docs += len(batch[0])

    def unhold(self) -> list[Batch]:
        """The held batches, in order; none held from now on."""
        held, self.held, self.held_docs, self.holding = self.held, [], 0, True
        return held

    def release_lock(self) -> None:
        """Let the folder's lock go, if this feed holds it."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.close()

    def ended(self, *, wait: bool) -> None:
        """Once the chunk committing on its thread is done (waited for with `wait`), let the
        folder's lock go; a chunk that failed to commit stops the feed (the log replays)."""
        if self.ending is None:
            return
        thread, ending = self.ending
        if not wait and thread.is_alive():
            return
        thread.join()
        self.ending = None
        self.failed = self.failed or ending.failed
        self.release_lock()
