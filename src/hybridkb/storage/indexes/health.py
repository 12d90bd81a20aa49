"""Why a derived index could not be used or written lately, and when to try again.

An index that cannot be opened, rebuilt or committed (damaged files, a read-only or full
folder) is not tried again on every search: each failure waits RETRY_S before the next
attempt, and searches answer meanwhile from what is sound (the committed index plus the
writes still in the store, the other retriever, an exact scan of the stored items) with a
note. The next success clears it, so recovery needs nothing but the cause gone.
"""

from __future__ import annotations

import errno
import logging
import shutil
import threading
import time
from pathlib import Path

RETRY_S = 5.0
FULL_BYTES = 16 << 20  # a folder whose disk has less free is called full
log = logging.getLogger("hybridkb")


def engine_failure(exc: BaseException) -> bool:
    """Whether `exc` came out of an index rather than from the user: the engines' errors
    (ValueError, OSError) and tantivy's panics (`pyo3_runtime.PanicException`, a
    BaseException that passes every `except Exception`); never Ctrl-C or an exit."""
    return not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit))


class IndexUnavailable(Exception):
    """A derived index cannot answer now (damaged and not rebuilt); the search answers
    from the store instead."""


def describe(exc: BaseException, folder: Path | None = None) -> str:
    """A failure in a few words: a full disk and a read-only folder by name (tantivy reports
    a full disk as "An index writer was killed": the folder's free space tells)."""
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or "No space left" in str(exc) or _full(folder):
        return "its folder's disk is full"
    if code in (errno.EEXIST, errno.ENOTDIR):
        return f"a file stands where its folder belongs ({getattr(exc, 'filename', None) or exc})"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or "Read-only file system" in str(exc):
        return f"its folder cannot be written: {exc}"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _full(folder: Path | None) -> bool:
    for path in (folder, folder.parent if folder else None):
        try:
            return path is not None and shutil.disk_usage(path).free < FULL_BYTES
        except OSError:
            continue
    return False


class Health:
    """One index's last failure (None: none since the last success). The first failure and
    the recovery are logged (a warning on stderr where nothing else handles the log), so a
    write that commits while its index cannot follow says so."""

    def __init__(self, what: str = "index", folder: Path | None = None) -> None:
        self.what, self.folder = what, folder
        self.reason: str | None = None
        self._until = 0.0
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> str:
        with self._lock:
            first = self.reason is None
            self.reason = describe(exc, self.folder)
            self._until = time.monotonic() + RETRY_S
        if first:
            log.warning("hybridkb: the %s cannot be updated (%s); writes are kept in the store "
                        "and searched from there, and it catches up once it can be written",
                        self.what, self.reason)
        return self.reason

    def unavailable(self, exc: BaseException, damage: str | None) -> IndexUnavailable:
        """A failed rebuild recorded (`failed`), and the error a search gets instead; Ctrl-C
        and an exit are raised again as they are."""
        if not engine_failure(exc):
            raise exc
        return IndexUnavailable(f"{damage or self.what}; cannot be rebuilt: {self.failed(exc)}")

    def ok(self) -> None:
        with self._lock:
            was, self.reason, self._until = self.reason, None, 0.0
        if was is not None:
            log.warning("hybridkb: the %s can be updated again", self.what)

    def waiting(self) -> bool:
        """Whether the last failure is too recent to try again."""
        return self.reason is not None and time.monotonic() < self._until
