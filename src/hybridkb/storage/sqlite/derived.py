"""The derived indexes beside a SQLite file as `check` sees them: what is wrong with
them, and rebuilding them from the items (`check --repair`).

Each index verifies its own files (storage/indexes/verify.py: every checksum); here the
folder itself (a plain file where it should be is moved aside, never deleted) and the
text index holding exactly the items.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ...errors import HybridKBError
from .. import notices
from ..indexes.health import describe, engine_failure
from ..indexes.sync import TextIndexSync
from ..indexes.vectors import VectorIndexSync

NOT_A_FOLDER = "index folder is not a folder"


class _Suspect(Protocol):
    def suspect(self) -> None: ...


def unusable(exc: BaseException, index: _Suspect, what: str, instead: str) -> None:
    """A search's index failed (damaged and not rebuilt, its folder unreadable, the engine
    raised or panicked): the index is opened again next time (its files checked) and the
    search notes what answers instead. Anything else (the store's own errors, Ctrl-C) is
    raised again."""
    if isinstance(exc, HybridKBError) or not engine_failure(exc):
        raise exc
    index.suspect()
    notices.note(f"{what} index unusable ({describe(exc)}): {what} hits come from {instead} "
                 "until it is rebuilt (`hybridkb check --repair`)")


def problems(folder: Path | None, text: TextIndexSync, vectors: VectorIndexSync, dim: int | None,
             item_rowids: Callable[[], list[int]], *, compare: bool) -> list[str]:
    """Why the derived indexes could not answer as they are; with `compare`, also the text
    index (caught up with the log first) against the items, rowid by rowid."""
    if folder is not None and folder.exists() and not folder.is_dir():
        return [f"{NOT_A_FOLDER}: {folder} is a file, so no index can be kept or rebuilt "
                "(searches scan the stored items); `hybridkb check --repair` moves it aside"]
    found = text.problems() + vectors.problems(dim)
    if not compare or any(p.startswith("text index") for p in found):
        return found
    try:
        indexed = set(text.current().all_rowids())
    except BaseException as exc:  # a damaged index that cannot even be rebuilt here
        if not engine_failure(exc):
            raise
        return [*found, f"text index: cannot be caught up with the store ({describe(exc, text.folder)})"]
    items = set(item_rowids())
    if indexed - items:
        found.append(f"{len(indexed - items)} text index documents without an item")
    if items - indexed:
        found.append(f"{len(items - indexed)} items missing from the text index")
    return found


def rebuild(folder: Path | None, text: TextIndexSync, vectors: VectorIndexSync, dim: int | None
            ) -> list[str]:
    """Rebuild every derived index from the items; returns what was done (a failure is
    reported, not raised: the store is sound, searches scan it meanwhile)."""
    done: list[str] = []
    if folder is not None and folder.exists() and not folder.is_dir():
        aside = folder.with_name(f"{folder.name}.not-a-folder-{int(time.time())}")
        folder.rename(aside)
        done.append(f"moved the file where the index folder belongs aside, to {aside}")
    text.health.ok()
    vectors.health.ok()
    try:
        text.rebuild_now()
        if dim is not None:
            vectors.build_now(dim)
    except BaseException as exc:
        if not engine_failure(exc):
            raise
        done.append(f"could not rebuild the derived indexes: {describe(exc)}")
        return done
    done.append("rebuilt the derived text and vector indexes from the items")
    return done
