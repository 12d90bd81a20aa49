"""What the derived indexes share around their files: the store's index folder, the lock
file (one process updates an index at a time) and closing indexes a process never closed
before it exits."""

from __future__ import annotations

import atexit
import contextlib
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

try:  # POSIX; elsewhere only one process may use a store's derived indexes at a time
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


IGNORE_ALL = "*\n"


def make_index_root(root: Path) -> None:
    """The store's index folder, with a `.gitignore` of `*` in it: a store kept inside a git
    work tree leaves its derived indexes (rebuildable, large) out of `git status`."""
    root.mkdir(parents=True, exist_ok=True)
    ignore = root / ".gitignore"
    if not ignore.exists():
        with contextlib.suppress(OSError):  # a read-only folder: the indexes matter, this does not
            ignore.write_text(IGNORE_ALL, encoding="utf-8")


class _Closable(Protocol):
    def close(self, timeout: float = ...) -> None: ...


_OPEN: weakref.WeakSet[_Closable] = weakref.WeakSet()


def close_at_exit(index: _Closable) -> None:
    """Close `index` when the interpreter exits, if the store was never closed: a background
    build or commit still running inside native code (usearch, tantivy) when Python tears
    down aborts the process (exit code 134)."""
    _OPEN.add(index)


@atexit.register
def _close_open_indexes() -> None:
    for index in list(_OPEN):
        with contextlib.suppress(Exception):
            index.close(timeout=30.0)


@contextlib.contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    if path is None or fcntl is None:
        yield
        return
    handle: IO[Any] = open(path, "a+b")  # noqa: SIM115 - held for the block
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()
