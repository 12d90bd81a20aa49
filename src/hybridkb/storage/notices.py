"""Notes a store adds to the search running now (an index that could not answer as it
should, and what answered instead): KnowledgeBase.search collects them into
`SearchResult.notes`. A context variable, so a retrieval on a worker thread notes into its
search when it runs in a copy of the search's context (pipeline.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_CURRENT: ContextVar[list[str] | None] = ContextVar("hybridkb_search_notes", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[list[str]]:
    """The notes of everything run inside the block (and in copies of its context)."""
    found: list[str] = []
    token = _CURRENT.set(found)
    try:
        yield found
    finally:
        _CURRENT.reset(token)


def note(text: str) -> None:
    """Add `text` to the running search's notes (once; nothing when no search collects)."""
    found = _CURRENT.get()
    if found is not None and text not in found:
        found.append(text)
