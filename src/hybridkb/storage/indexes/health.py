"""Why a derived index could not be used or written lately, and when to try again.

An index that cannot be opened, rebuilt or committed (damaged files, a read-only or full
folder) is not tried again on every search: each failure waits RETRY_S before the next
attempt, and searches answer meanwhile from what is sound (the committed index plus the
writes still in the store, the other retriever, an exact scan of the stored items) with a
note. The next success clears it, so recovery needs nothing but the cause gone.
"""

from __future__ import annotations

import errno
import threading
import time

RETRY_S = 5.0


class IndexUnavailable(Exception):
    """A derived index cannot answer now (damaged and not rebuilt); the search answers
    from the store instead."""


def describe(exc: BaseException) -> str:
    """A failure in a few words: a full disk and a read-only folder by name."""
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or "No space left" in str(exc):
        return "its folder's disk is full"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or "Read-only file system" in str(exc):
        return f"its folder cannot be written: {exc}"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class Health:
    """One index's last failure (None: none since the last success)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._until = 0.0
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> str:
        with self._lock:
            self.reason = describe(exc)
            self._until = time.monotonic() + RETRY_S
            return self.reason

    def ok(self) -> None:
        with self._lock:
            self.reason, self._until = None, 0.0

    def waiting(self) -> bool:
        """Whether the last failure is too recent to try again."""
        return self.reason is not None and time.monotonic() < self._until
