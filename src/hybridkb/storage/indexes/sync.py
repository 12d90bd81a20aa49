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
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from ...progress import ProgressFactory, no_progress
from .. import notices
from .bulk_feed import Batch, Feed
from .health import Health, IndexUnavailable, engine_failure
from .locks import _file_lock, close_at_exit, make_index_root
from .text import IndexUnusable, StateReader, TextIndex, read_state
from .text_delta import TextDelta
from .text_schema import TITLE_REPEAT, TextDoc, to_document

# Replay at most this many changed rows per pass; past this share of the store, a
# rebuild (no deletes, one sequential scan) is cheaper than a replay.
CATCH_UP_BATCH = 20_000
REBUILD_SHARE = 0.5
# Pending rowids a search scores itself (text_delta.py) before it waits for a commit.
DELTA_MAX = 2_000
COMMIT_INTERVAL_S = 0.5  # background commits of one process at most this often
# A bulk write (feeding()) takes its batches into the index itself once it has written
# this many items (fewer are left to the delta and the background commit), and commits
# at least this often, releasing the folder's lock so that other processes can catch up.
FEED_MIN = DELTA_MAX
FEED_CHUNK_S = 30.0
# A chunk replays into its own writer a gap of up to this many changes (the batches written
# while the chunk before it committed aside); a larger gap is committed first, in steps of
# CATCH_UP_BATCH. Each step is a segment: at 1M items, gaps of 20,000+ left six small
# segments that every search then visited (2026-11-28; git history of docs/benchmarks.md).
FEED_REPLAY_MAX = 250_000
# Indexing threads of a bulk feed's writer. The writing thread (rows, prints, documents:
# ~300 us an item) is the bound, and one indexing thread keeps up with it; a second one
# only took CPU from it (100,000 items on 2 cores: 2,784-2,869 items/s with two against
# 2,901-3,012 with one; 1,000,000: the same wall time at load 1.3 instead of 1.8).
FEED_THREADS = 1
# Documents of the batches written while a chunk commits aside, kept for the next chunk's
# writer (instead of read back from the store: rows, unpacked texts, documents again); past
# this many, the rest of that commit's batches wait in the log and are replayed.
FEED_HOLD_MAX = 50_000


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

    def text_changes(self, seq: int, limit: int) -> tuple[list[tuple[int, int]], int]:
        """The same as (seq, rowid) pairs."""
        ...

    def text_docs(self, rowids: Sequence[int]) -> list[TextDoc]:
        """Current documents of the rowids that still exist."""
        ...

    def item_count(self) -> int: ...

    def iter_text_docs(self, batch_size: int) -> Iterator[list[TextDoc]]: ...


class TextIndexSync:
    """The text index of one store, kept current with its change log.

    `view()` answers at once: the committed index plus a delta of the writes it does not
    hold yet (text_delta.py), folded in by a background commit. `current()` waits for
    the index itself to hold every committed write (checks, rebuilds, tests).
    """

    def __init__(self, folder: Path | None, source: ChangeSource,
                 progress: ProgressFactory = no_progress, *, title_repeat: int = TITLE_REPEAT,
                 background: bool = True) -> None:
        self.folder = folder  # None: in memory (a ":memory:" store)
        self.title_repeat = title_repeat
        self.source = source
        self.progress = progress
        self.background = background  # False: a search commits the delta itself
        self._lock = threading.RLock()
        self._held = threading.local()
        self._index: TextIndex | None = None
        self._delta = TextDelta()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._last_commit = 0.0
        self.rebuilds = 0  # how many rebuilds this process ran (for tests and `check`)
        self._state = None if folder is None else StateReader(folder)  # read per search: by stat
        self._feed: Feed | None = None
        self.health = Health("text index", folder)  # opening or rebuilding failed: searches scan
        self.lag = Health("text index", folder)  # committing failed (read-only, full): the delta grows
        self._damage: str | None = None  # why the last open found the index unusable
        close_at_exit(self)

    @property
    def _lock_path(self) -> Path | None:
        return None if self.folder is None else self.folder.with_name(self.folder.name + ".lock")

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The index folder to this thread alone, across processes; re-entrant per thread
        (two flocks of one file in one process would wait on each other)."""
        if getattr(self._held, "depth", 0):
            self._held.depth += 1
            try:
                yield
            finally:
                self._held.depth -= 1
            return
        if self.folder is not None:
            make_index_root(self.folder.parent)
        with _file_lock(self._lock_path):
            self._held.depth = 1
            try:
                yield
            finally:
                self._held.depth = 0

    def view(self) -> tuple[TextIndex, TextDelta]:
        """The committed index and the delta of later writes, together every committed write.
        When the folder cannot be written (read-only, full: `lag`), the delta holds them all."""
        with self._lock:
            index = self._usable()
            _, head = self.source.log_bounds()
            if self._delta.base_seq == index.seq and self._delta.seq >= head:
                if len(self._delta) and self.lag.reason is not None and not self.lag.waiting():
                    self._start_worker()  # time to try the folder again
                return index, self._note_lag(self._delta)
            delta = self._delta.copy()  # searches already holding the old one keep it as it is
            self._delta = delta
            if delta.base_seq != index.seq:
                delta.rebase(index.seq)
            while delta.seq < head:
                changes, reached = self.source.text_changes(delta.seq, DELTA_MAX + 1)
                if len(delta) + len(changes) > DELTA_MAX and not self.lag.waiting():
                    if (caught := self._try_catch_up()) is not None:  # commit before answering
                        return caught, self._delta
                    return self.view()  # refused (lag waits now): the delta over what is there
                docs = self.source.text_docs(list(dict.fromkeys(r for _, r in changes)))
                delta.add(changes, docs, index.analyze, index.title_repeat, reached)
            if len(delta) and not self.lag.waiting():
                if self.background:
                    self._start_worker()
                elif (caught := self._try_catch_up()) is not None:
                    return caught, self._delta
            return index, self._note_lag(self._delta)

    def _try_catch_up(self) -> TextIndex | None:
        """Commit every logged change now; None when the folder refuses (noted in `lag`)."""
        try:
            with self._exclusive():
                index = self._catch_up()
        except BaseException as exc:
            if not engine_failure(exc):
                raise
            self.lag.failed(exc)
            return None
        self.lag.ok()
        return index

    def _note_lag(self, delta: TextDelta) -> TextDelta:
        why = self.lag.reason if len(delta) else None  # a read-only folder before it failed:
        if len(delta) and why is None and self.folder and not os.access(self.folder, os.W_OK):
            why = "its folder cannot be written"
        if why:
            notices.note(f"the text index lags the store by {len(delta)} items ({why}); "
                         "searches read them from the store until it can be written")
        return delta

    def current(self) -> TextIndex:
        """The index, caught up with every write committed before this call."""
        with self._lock:
            index = self._usable()
            _, head = self.source.log_bounds()
            if index.seq >= head:
                return index
            with self._exclusive():
                return self._catch_up()

    def _usable(self) -> TextIndex:
        """This process's index handle: reloaded when another commit landed, reopened when
        another process rebuilt it, rebuilt when it is missing, broken or the log no longer
        joins it. Call under self._lock."""
        index = self._index
        state = self._state.read() if self._state is not None else None
        if index is not None and self.folder is not None:
            if state is None or state.get("generation") != index.generation or (
                    index.shadowed and os.access(self.folder, os.W_OK)):  # writable again
                index = None
            elif state["seq"] != index.seq:
                try:
                    index.reload()
                except IndexUnusable as exc:  # that commit's files are not what it wrote
                    self._damage, index = str(exc), None
        if index is None:
            if self.health.waiting():
                raise IndexUnavailable(f"text index: {self.health.reason}")
            index = self._open()
        oldest, head = self.source.log_bounds()
        if index is None or index.seq < oldest - 1 or index.seq > head:
            try:
                with self._exclusive():
                    index = self._open()  # another process may have rebuilt it meanwhile
                    oldest, head = self.source.log_bounds()
                    if index is None or index.seq < oldest - 1 or index.seq > head:
                        index = self.rebuild()
                        if self._damage:
                            notices.note(f"{self._damage}: rebuilt from the items")
            except BaseException as exc:
                raise self.health.unavailable(exc, self._damage) from exc
            self.health.ok()
            self._damage = None
        if index is not self._index:
            self._index = index
            self._delta = TextDelta(base_seq=index.seq, seq=index.seq)
        return index

    def _open(self) -> TextIndex | None:
        if self.folder is None:
            return self._index
        try:
            return TextIndex.open(self.folder, self.source.store_id, title_repeat=self.title_repeat)
        except IndexUnusable as exc:
            if (self.folder / "meta.json").exists():  # not merely never built
                self._damage = str(exc)
            return None

    def suspect(self) -> None:  # a search failed in the engine: reopened (files checked)
        self._index = None

    def _catch_up(self) -> TextIndex:
        """Commit every logged change into the index (under the file lock)."""
        self._flush_feed()
        index = self._usable()
        while True:
            _oldest, head = self.source.log_bounds()
            if index.seq >= head:
                delta = self._delta.copy()
                delta.rebase(index.seq)
                self._delta = delta
                return index
            rowids, reached = self.source.changed_since(index.seq, CATCH_UP_BATCH)
            if len(rowids) > 1000 and len(rowids) > REBUILD_SHARE * max(1, self.source.item_count()):
                index = self.rebuild()
                continue
            docs = self.source.text_docs(rowids)
            present = {d.rowid for d in docs}
            index.apply(docs, [r for r in rowids if r not in present], reached)

    def _start_worker(self) -> None:
        if self._closed or self.lag.waiting() or (self._worker is not None and self._worker.is_alive()):
            return
        self._worker = threading.Thread(target=self._work, name="hybridkb-text-index", daemon=True)
        self._worker.start()

    def kick(self) -> None:
        """After a write: fold it into the index in the background, so searches find a small
        delta. Only an index that exists is updated this way; a missing one is built by
        the next search (with its progress bar), never behind a writer's back."""
        if self.background:
            self._start_worker()

    def _work(self) -> None:
        """Background: fold the delta into the index. Searches go on meanwhile (tantivy's
        commit releases the GIL); a failure here only leaves the delta for the next try."""
        # Lock order: self._lock is never held while waiting for the file lock here (a search
        # holds self._lock and may wait for the file lock: the other order would deadlock).
        try:
            with self._lock:
                index = self._index
                if index is not None and index.shadowed:  # open it writable, if it is now
                    index = self._index = None
            if index is None:
                index = self._open()
                if index is None:
                    return
                with self._lock:
                    if self._index is None:
                        self._index = index
                        self._delta = TextDelta(base_seq=index.seq, seq=index.seq)
                    index = self._index
            with self._exclusive():
                self._fold(index)
            self.lag.ok()
        except BaseException as exc:  # the log keeps the writes; the next try folds them
            if not engine_failure(exc):
                raise
            self.lag.failed(exc)

    def _fold(self, index: TextIndex) -> None:
        """Commit the logged changes into `index` (under the file lock)."""
        while not self._closed:
            oldest, head = self.source.log_bounds()
            if index.seq >= head or index.seq < oldest - 1:
                return
            # A commit costs ~100 ms however small: under a stream of writes, wait a little
            # so one commit takes many of them (searches meanwhile read the delta).
            if time.monotonic() - self._last_commit < COMMIT_INTERVAL_S:
                time.sleep(COMMIT_INTERVAL_S)
                continue
            rowids, reached = self.source.changed_since(index.seq, CATCH_UP_BATCH)
            docs = self.source.text_docs(rowids)
            present = {d.rowid for d in docs}
            index.apply(docs, [r for r in rowids if r not in present], reached)
            self._last_commit = time.monotonic()

    def close(self, timeout: float = 30.0) -> None:
        """Let a running background commit finish (its work is kept), start no other: the
        worker stops after its current commit, and the log keeps the rest for the next open."""
        self._closed = True
        worker = self._worker
        if worker is not None and worker.is_alive():
            worker.join(timeout)

    # -- bulk writes ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def feeding(self, meanwhile: Callable[[], None] = lambda: None) -> Iterator[None]:
        """A bulk write: each batch committed inside (`feed()`) goes straight into one open
        tantivy writer, whose indexing threads work while the next batch is written, and the
        index is committed when the block ends. So a large load is searchable by text when
        it returns, instead of leaving the whole index to be built by the first search.
        `meanwhile` runs on this thread while that last commit runs on another (the store
        builds its vector base then: two tails of a load that each keep one core busy).

        Crash safety is the log's: a batch is committed to the store first and fed after,
        and whatever the writer held but had not committed when it failed or the process
        died is replayed from the log by the next search. The folder's lock is held while a
        chunk is open (other processes wait for it only when their delta is too large to
        score), released at each commit, at least every FEED_CHUNK_S."""
        if self._feed is not None or self._closed:  # another thread feeds: this one logs
            yield
            meanwhile()
            return
        feed = self._feed = Feed(thread=threading.get_ident())
        ran = completed = False  # `meanwhile` only after a load that completed
        try:
            yield
            completed = True
        finally:
            self._feed = None
            try:
                feed.ended(wait=True)
                if not feed.failed and feed.behind > feed.seq:  # the load's last batches
                    if feed.writer is None:
                        self._begin_chunk(feed, feed.held[0][1] if feed.held else feed.behind)
                    self._take_held(feed)
                    self._replay(feed, feed.behind)
                if feed.writer is not None and completed:
                    self._end_chunk_soon(feed)
                    try:
                        ran = True
                        meanwhile()
                    finally:
                        feed.ended(wait=True)
                self._end_chunk(feed)  # the lock, when no writer was open
            except Exception:  # the store holds every batch: the log replays them
                feed.failed = True
                self._drop_chunk(feed)
            if feed.waiting or feed.failed:
                self.kick()
        if completed and not ran:
            meanwhile()

    def is_feeding(self) -> bool:
        """Whether a write on this thread should hand its batch to `feed()`."""
        feed = self._feed
        return feed is not None and feed.thread == threading.get_ident() and not feed.failed

    def feed(self, docs: Sequence[TextDoc], first_seq: int, last_seq: int, *, replacing: bool) -> None:
        """Take a committed batch into the open writer: its documents are the items written by
        the transaction that logged changes `first_seq + 1 .. last_seq` (all of them: the
        writer then holds every change up to `last_seq`). `replacing`: some may be updates
        of items the index holds. Changes of other writers logged before it are replayed
        from the store first. An index failure is not the writer's: the store holds the
        batch, the log replays it later."""
        feed = self._feed
        if feed is None or feed.thread != threading.get_ident() or feed.failed:
            return
        if feed.ending is not None:  # this batch waits for the next chunk: held, or in the log
            feed.behind = last_seq
            feed.hold((docs, first_seq, last_seq, replacing), FEED_HOLD_MAX)
            feed.ended(wait=False)  # done: the lock goes now, the chunk with the next batch
            return
        try:
            if feed.writer is None:
                if not feed.chunks and feed.waiting + len(docs) < FEED_MIN:
                    feed.waiting += len(docs)  # small so far: the delta covers it
                    return
                self._begin_chunk(feed, feed.held[0][1] if feed.held else first_seq)
            self._take_held(feed)
            if not self._take(feed, (docs, first_seq, last_seq, replacing)):
                return  # a catch-up already took it from the log
            if time.monotonic() - feed.started >= FEED_CHUNK_S:
                self._end_chunk_soon(feed)
        except Exception:
            feed.failed = True
            self._drop_chunk(feed)
        except BaseException:  # KeyboardInterrupt: the store has the batch; stop feeding
            feed.failed = True
            self._drop_chunk(feed)
            raise

    def _take(self, feed: Feed, batch: Batch) -> bool:
        """A batch into the open writer: after the changes other writers logged before it
        (replayed from the store), unless a catch-up already took it from the log (False)."""
        docs, first_seq, last_seq, replacing = batch
        if last_seq <= feed.seq:
            return False
        if first_seq > feed.seq:
            self._replay(feed, first_seq)
        writer, repeat = feed.writer, feed.index.title_repeat  # type: ignore[union-attr]
        for doc in docs:
            if replacing:
                writer.delete_documents_by_term("rowid", doc.rowid)
            writer.add_document(to_document(doc, repeat))
        feed.seq = last_seq
        return True

    def _take_held(self, feed: Feed) -> None:
        """The batches held while the last chunk committed, into the open writer (the ones
        that went to the log are replayed by the next `_take` or `_replay`)."""
        for batch in feed.unhold():
            self._take(feed, batch)

    def _begin_chunk(self, feed: Feed, first_seq: int) -> None:
        """Take the folder's lock (kept until the chunk ends) and open a writer on the index
        (built when missing: the first chunk of a load into a new store). An index far
        behind the batch about to be fed is caught up and committed first; a gap of up to
        FEED_REPLAY_MAX is replayed into the writer by `feed()`."""
        with self._lock:  # lock order: self._lock, then the file lock (see _work)
            if feed.lock is None:
                stack = contextlib.ExitStack()
                stack.enter_context(self._exclusive())
                feed.lock = stack
            index = self._usable()
            if first_seq - index.seq > FEED_REPLAY_MAX:
                index = self._catch_up()
        feed.waiting, feed.chunks = 0, feed.chunks + 1
        feed.index, feed.seq, feed.started = index, index.seq, time.monotonic()
        feed.writer = index.writer(bulk=True, threads=FEED_THREADS)

    def _replay(self, feed: Feed, before: int) -> None:
        """Into the open writer: the changes other writers logged after `feed.seq` and up to
        `before` (read back from the store, as a catch-up does)."""
        writer, repeat = feed.writer, feed.index.title_repeat  # type: ignore[union-attr]
        while feed.seq < before:
            pairs, reached = self.source.text_changes(feed.seq, CATCH_UP_BATCH)
            pairs = [(s, r) for s, r in pairs if s <= before]
            rowids = list(dict.fromkeys(r for _, r in pairs))
            docs = self.source.text_docs(rowids)
            for rowid in rowids:
                writer.delete_documents_by_term("rowid", rowid)
            for doc in docs:
                writer.add_document(to_document(doc, repeat))
            feed.seq = min(reached, before) if pairs else before

    def _flush_feed(self) -> None:
        """Commit this thread's open feed writer (a catch-up or rebuild on the feeding thread
        needs the index to itself); the file lock stays with the chunk."""
        feed = self._feed
        if feed is not None and feed.thread == threading.get_ident() and feed.writer is not None:
            writer, feed.writer = feed.writer, None
            feed.index.commit(writer, feed.seq)  # type: ignore[union-attr]
            del writer

    def _end_chunk(self, feed: Feed) -> None:
        """Commit the chunk's writer and release the folder's lock."""
        try:
            if feed.writer is not None:
                writer, feed.writer = feed.writer, None
                try:
                    feed.index.commit(writer, feed.seq)  # type: ignore[union-attr]
                finally:
                    del writer
        finally:
            feed.release_lock()

    def _end_chunk_soon(self, feed: Feed) -> None:
        """Commit the chunk on another thread. tantivy's commit and the merges it waits for
        (seconds a chunk at a million items) let go of the GIL, so this thread writes on
        meanwhile; the documents of the batches it writes until then are held for the next
        chunk (past FEED_HOLD_MAX they wait in the log, replayed from the store). This
        thread keeps the folder's lock (it is this thread's: `_exclusive`) and lets it go
        once the commit is done (`Feed.ended`)."""
        ending = Feed(thread=feed.thread, index=feed.index, writer=feed.writer, seq=feed.seq)
        feed.writer = None

        def end() -> None:
            try:
                self._end_chunk(ending)
            except Exception:  # the log holds the chunk's batches
                ending.failed = True
                self._drop_chunk(ending)

        thread = threading.Thread(target=end, name="hybridkb-feed-commit", daemon=True)
        feed.ending = (thread, ending)
        thread.start()

    def _drop_chunk(self, feed: Feed) -> None:
        """Abandon the chunk's uncommitted documents (the log still holds their changes)."""
        feed.unhold()
        writer, feed.writer = feed.writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.rollback()
            del writer
        feed.release_lock()

    def rebuild(self) -> TextIndex:
        """A new index from every item, published when complete (call under the file lock)."""
        self._flush_feed()
        _, head = self.source.log_bounds()  # read first: later changes are replayed after
        index = TextIndex.create(self.folder, self.source.store_id, title_repeat=self.title_repeat)
        total = self.source.item_count()

        def docs() -> Iterator[TextDoc]:
            with self.progress(total, "text index") as bar:
                for batch in self.source.iter_text_docs(2000):
                    yield from batch
                    bar.update(len(batch))

        index.apply(docs(), (), head, fresh=True)
        self.rebuilds += 1
        self._index = index
        self._delta = TextDelta(base_seq=index.seq, seq=index.seq)
        return index

    def disk_seq(self) -> int | None:
        """The sequence the index on disk reflects (None: none there, or in memory)."""
        if self.folder is None:
            return None
        state = read_state(self.folder)
        return None if state is None else int(state["seq"])

    def rebuild_now(self) -> TextIndex:
        """Rebuild from the items whatever state the index is in (`check --repair`)."""
        with self._lock, self._exclusive():
            self.rebuild()
            return self._catch_up()

    def problems(self) -> list[str]:
        """Why the index on disk could not answer as it is (empty when it can, or when it was
        never built: the next search builds it)."""
        if self.folder is None or not self.folder.exists():
            return []
        try:
            index = TextIndex.open(self.folder, self.source.store_id, title_repeat=self.title_repeat)
        except IndexUnusable as exc:
            return [f"text index: {exc} (rebuilt from the items on the next search)"]
        if damage := index.problems(full=True):  # every file's checksum (tantivy's footers)
            return [f"text index is damaged: {p}" for p in damage]
        oldest, head = self.source.log_bounds()
        if index.seq < head and not os.access(self.folder, os.W_OK):
            return [f"text index: its folder {self.folder} cannot be written; {head - index.seq} "
                    "logged changes wait to be indexed (searches read them from the store)"]
        if index.seq < oldest - 1 or index.seq > head:
            return [f"text index reflects change {index.seq}, which the log no longer joins "
                    f"(log holds {oldest}..{head}); rebuilt on the next search"]
        return []
