"""Retrieval lists as item ids, for tests that call a backend's retrievals directly."""

from __future__ import annotations

from typing import Any


def named(backend: Any, scored: list[tuple[Any, float]]) -> list[tuple[str, float]]:
    """(key, score) pairs as (id, score): a dialect names items by its own key (SQLite: the
    rowid), read back as the pipeline does (`items_by_key`)."""
    items = backend.items_by_key([k for k, _ in scored])
    return [(items[k].id, s) for k, s in scored if k in items]
