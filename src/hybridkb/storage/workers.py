"""A lazily started pool of worker threads that survives a fork (the child starts its own)."""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar


class Workers:
    """ThreadPoolExecutor created on first use. A forked child inherits the parent's
    pool object but not its threads, so after a fork every pool starts again empty."""

    _all: ClassVar[weakref.WeakSet[Workers]] = weakref.WeakSet()

    def __init__(self, max_workers: int, name: str) -> None:
        self.max_workers, self.name = max_workers, name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        Workers._all.add(self)

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers,
                                                thread_name_prefix=self.name)
            return self._pool

    def _forget(self) -> None:
        self._pool, self._lock = None, threading.Lock()


def _forget_all() -> None:
    for workers in list(Workers._all):
        workers._forget()


os.register_at_fork(after_in_child=_forget_all)
