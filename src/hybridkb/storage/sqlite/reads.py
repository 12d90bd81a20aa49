"""Reads every search repeats, kept until the store changes (issue #15: a search ran about
14 SQL statements around the engines; most asked what the previous search had asked).

SQLite tells a connection when another one committed (`PRAGMA data_version`); with the
backend's count of its own write transactions that makes a token that changes whenever
an answer may have: the meta table, the change log's bounds, the published vector base,
the corpus counts and whether items wait for a vector are kept per token. A search reads
the token once (`SQLiteBackend.pinned_reads`).

Called under the backend's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Memo:
    """Answers kept while the token they were read under stays the same."""

    def __init__(self) -> None:
        self._key: object = None
        self._values: dict[str, Any] = {}

    def get(self, name: str, key: object, compute: Callable[[], Any]) -> Any:
        if key != self._key:
            self._values = {}
            self._key = key
        if name not in self._values:
            self._values[name] = compute()
        return self._values[name]
