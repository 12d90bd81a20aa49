"""Keeping a derived text index in step with the store's change log.

Every committed write to the items gets a sequence number in the store's change log.
Before answering, `TextIndexSync.current()` compares the sequence the index reflects
with the log: equal means answer; behind means replay the changed items (read from the
store, so the replay always writes their current state); missing, damaged, of another
format or older than what the log still holds means rebuild from the items, with a
progress bar. Only one process catches up at a time (an exclusive lock file beside the
index); the others wait for it and then reload.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from ...progress import ProgressFactory, no_progress
from .text import IndexUnusable, TextIndex, read_state
from .text_schema import TextDoc

try:  # POSIX; elsewhere only one process may use a store's derived indexes at a time
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

# Replay at most this many changed rows per pass; past this share of the store, a
# rebuild (no deletes, one sequential scan) is cheaper than a replay.
CATCH_UP_BATCH = 20_000
REBUILD_SHARE = 0.5


class ChangeSource(Protocol):
    """What the store offers a derived index: its log and its items as TextDocs."""

    store_id: str

    def log_bounds(self) -> tuple[int, int]:
        """(oldest sequence still in the log, or the current one + 1 when empty; current)."""
        ...

    def changed_since(self, seq: int, limit: int) -> tuple[list[int], int]:
        """Distinct rowids whose text-index fields changed after `seq` (at most `limit`
        log rows read), and the last sequence read."""
        ...

    def text_docs(self, rowids: Sequence[int]) -> list[TextDoc]:
        """Current documents of the rowids that still exist."""
        ...

    def item_count(self) -> int: ...

    def iter_text_docs(self, batch_size: int) -> Iterator[list[TextDoc]]: ...


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


class TextIndexSync:
    """The text index of one store, kept current with its change log."""

    def __init__(self, folder: Path | None, source: ChangeSource,
                 progress: ProgressFactory = no_progress) -> None:
        self.folder = folder  # None: in memory (a ":memory:" store)
        self.source = source
        self.progress = progress
        self._lock = threading.RLock()
        self._index: TextIndex | None = None
        self.rebuilds = 0  # how many rebuilds this process ran (for tests and `check`)

    @property
    def _lock_path(self) -> Path | None:
        return None if self.folder is None else self.folder.with_name(self.folder.name + ".lock")

    def current(self) -> TextIndex:
        """The index, caught up with every write committed before this call."""
        with self._lock:
            _, head = self.source.log_bounds()
            index = self._index
            if index is not None and index.seq >= head:
                return index
            if index is not None and self.folder is not None:
                # Another process may have caught up already: a state file read, no lock.
                state = read_state(self.folder)
                if (state is not None and state.get("generation") == index.generation
                        and state["seq"] >= head):
                    index.reload()
                    return index
            if self.folder is not None:
                self.folder.parent.mkdir(parents=True, exist_ok=True)
            with _file_lock(self._lock_path):
                return self._catch_up()

    def _open(self) -> TextIndex | None:
        if self.folder is None:
            return self._index
        if self._index is not None:
            state = read_state(self.folder)
            if state is not None and state.get("generation") == self._index.generation:
                self._index.reload()
                return self._index
        try:
            return TextIndex.open(self.folder, self.source.store_id)
        except IndexUnusable:
            return None

    def _catch_up(self) -> TextIndex:
        index = self._open()
        oldest, head = self.source.log_bounds()
        while True:
            if index is None or index.seq < oldest - 1 or index.seq > head:
                index = self.rebuild()
                oldest, head = self.source.log_bounds()
            if index.seq >= head:
                self._index = index
                return index
            rowids, reached = self.source.changed_since(index.seq, CATCH_UP_BATCH)
            if len(rowids) > REBUILD_SHARE * max(1, self.source.item_count()) and len(rowids) > 1000:
                index = None
                continue
            docs = self.source.text_docs(rowids)
            present = {d.rowid for d in docs}
            index.apply(docs, [r for r in rowids if r not in present], reached)
            self._index = index

    def rebuild(self) -> TextIndex:
        """A new index from every item, published when complete (call under the file lock)."""
        _, head = self.source.log_bounds()  # read first: later changes are replayed after
        index = TextIndex.create(self.folder, self.source.store_id)
        total = self.source.item_count()

        def docs() -> Iterator[TextDoc]:
            with self.progress(total, "text index") as bar:
                for batch in self.source.iter_text_docs(2000):
                    yield from batch
                    bar.update(len(batch))

        index.apply(docs(), (), head, fresh=True)
        self.rebuilds += 1
        self._index = index
        return index

    def problems(self) -> list[str]:
        """Why the index on disk could not answer as it is (empty when it can)."""
        if self.folder is None:
            return []
        try:
            index = TextIndex.open(self.folder, self.source.store_id)
        except IndexUnusable as exc:
            return [f"text index: {exc} (rebuilt from the items on the next search)"]
        oldest, head = self.source.log_bounds()
        if index.seq < oldest - 1 or index.seq > head:
            return [f"text index reflects change {index.seq}, which the log no longer joins "
                    f"(log holds {oldest}..{head}); rebuilt on the next search"]
        return []
