"""The vector index of one store: a published base generation plus an exact delta.

The base (vector_base.py) is files written once and memory-mapped; the store records
which generation is current and the change-log sequence it reflects. Vectors written
after that sequence form the delta: read from the store by rowid, kept in memory and
searched exactly, their older versions in the base skipped. When the delta grows past a
few percent of the base, or the base lacks the graph its size calls for, a background
thread builds the next generation from the store and publishes it (rename, then one
row in the store), so writes and searches never wait for a graph build. Only a store
with no usable base at all builds one before answering (a copy with its one-bit codes,
no graph). Measuring the passes again on the store's asked queries, with no vector
changed since the build, adds a measurement to the generation instead of building one.

A superseded generation is removed as soon as the next one is published: a reader that
opened it keeps its memory maps (an unlinked file stays readable while mapped, on Linux),
and a reader that had not opened it yet finds the newer one recorded (`_current_base`).
What a crash or a killed process left (a temporary folder, a generation never published
or never removed) goes at the first look at the folder in the next process.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ...progress import ProgressFactory, no_progress
from .. import asked, notices
from . import vector_base, verify
from .health import Health, IndexUnavailable
from .locks import _file_lock, close_at_exit, make_index_root
from .vector_base import BaseUnusable, VectorBase
from .vector_batch import Batch, RowIds, Vector

DELTA_MIN = 2_000  # the delta may grow to max(DELTA_MIN, DELTA_SHARE x base) before a rebuild
DELTA_SHARE = 0.05
ANN_MODES = ("auto", "on", "codes", "off")


class VectorSource(Protocol):
    store_id: str

    def log_bounds(self) -> tuple[int, int]: ...
    def vector_changes(self, seq: int, limit: int) -> tuple[list[tuple[int, int]], int]: ...
    def vectors(self, rowids: Sequence[int], dim: int) -> Batch: ...
    def stored_vectors(self, rowids: Sequence[int], dim: int) -> tuple[RowIds, Any]: ...
    def iter_vectors(self, dim: int, batch_size: int = 4096) -> Iterator[Batch]: ...
    def vector_count(self) -> int: ...
    def published(self, name: str, *, fresh: bool = False) -> tuple[str, int, int] | None: ...
    def publish(self, name: str, generation: str, seq: int, dim: int) -> None: ...
    def asked_queries(self, dim: int) -> tuple[Any, int]: ...
    def asked_after(self, dim: int, seq: int) -> int: ...


@dataclass(slots=True)
class VectorDelta:
    """Rowid -> its current row (None: deleted or without a vector), for changes after `seq0`."""

    seq0: int
    seq: int
    rows: dict[int, tuple[Vector, str, float, bool] | None] = field(default_factory=dict)
    _live: Batch | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def update(self, rowids: Sequence[int], found: Batch) -> None:
        have = {int(r): i for i, r in enumerate(found.rowids)}
        for r in rowids:
            i = have.get(int(r))
            self.rows[int(r)] = None if i is None else (
                found.vectors[i], found.corpora[i], float(found.expires[i]), bool(found.stale[i]))
        self._live = None

    def live(self) -> Batch:
        """The delta's rows that have a vector, as arrays (kept until the next update)."""
        if self._live is None:
            rows = sorted((r, v) for r, v in self.rows.items() if v is not None)
            self._live = Batch(
                rowids=np.array([r for r, _ in rows], dtype=np.int64),
                vectors=(np.vstack([v[0] for _, v in rows]).astype(np.float32) if rows
                         else np.zeros((0, 0), dtype=np.float32)),
                corpora=[v[1] for _, v in rows],
                expires=np.array([v[2] for _, v in rows], dtype=np.float64),
                stale=np.array([v[3] for _, v in rows], dtype=bool))
        return self._live


class VectorIndexSync:
    """Base + delta for one store and one dimension; see the module docstring."""

    NAME = "vectors"

    def __init__(self, folder: Path | None, source: VectorSource, *, ann: str = "auto",
                 progress: ProgressFactory = no_progress, background: bool = True) -> None:
        if ann not in ANN_MODES:
            raise ValueError(f"vector_ann must be one of {', '.join(ANN_MODES)}, not {ann!r}")
        self.folder = folder  # None: a ":memory:" store keeps everything in the delta
        self.source = source
        self.ann = ann
        self.progress = progress
        self.background = background and ann == "auto"
        self._lock = threading.RLock()
        self._base: VectorBase | None = None
        self._base_key: tuple[str, int, int] | None = None
        self._delta: VectorDelta | None = None
        self._worker: threading.Thread | None = None
        self._closed = False
        self._swept = False
        self.builds = 0
        self.measurements = 0  # measurements added to a generation (no new matrix)
        self.health = Health("vector index", folder)  # building failed (read-only, full folder)
        self._damage: str | None = None  # why the published generation could not be opened
        self._bad_key: tuple[str, int, int] | None = None  # ...that generation (not opened again)
        close_at_exit(self)

    # -- reading --------------------------------------------------------------------------------

    def must_build_first(self, dim: int) -> bool:
        """Whether the next search would have to build a base before answering: none is
        published yet, or the vectors written since it are too many to hold as a delta."""
        if self.folder is None:
            return False
        with self._lock:
            base = self._current_base(dim)
            if base is None:
                return self.source.vector_count() > 0
            _, head = self.source.log_bounds()
            return head - base.seq > _delta_ceiling(base)

    def view(self, dim: int, *, read_only: bool = False) -> tuple[VectorBase | None, VectorDelta]:
        """The current base (None: everything is in the delta) and the delta after it.
        `read_only`: the store takes no writes (a newer schema, damage), so no base is
        published; without one, every vector is read into the delta."""
        with self._lock:
            base = self._current_base(dim)
            if base is None and read_only:
                if self._delta is None or self._delta.seq0 != -1:
                    delta = VectorDelta(-1, self.source.log_bounds()[1])
                    for batch in self.source.iter_vectors(dim):
                        delta.update([int(r) for r in batch.rowids], batch)
                    self._delta = delta
                return None, self._delta
            if base is None and self.folder is not None and self.source.vector_count() > 0:
                base = self._build_first(dim, None)
            if base is not None and self.folder is not None and not self.health.waiting():
                _, head = self.source.log_bounds()
                if head - base.seq > _delta_ceiling(base):
                    # e.g. a re-embedding rewrote every vector: a delta that size would be the
                    # whole store in memory, so build a flat base first (the graph follows)
                    with contextlib.suppress(IndexUnavailable):  # else: the larger delta
                        base = self._build_first(dim, base)
            seq0 = base.seq if base is not None else 0
            if self._delta is None or self._delta.seq0 != seq0:
                self._delta = VectorDelta(seq0, seq0)
            _, head = self.source.log_bounds()
            if self._delta.seq < head:  # copy, then change: searches keep the delta they got
                delta = VectorDelta(self._delta.seq0, self._delta.seq, dict(self._delta.rows))
                self._advance(delta, dim)
                self._delta = delta
            if len(self._delta) and self.health.reason is not None:
                notices.note(f"the vector index lags the store by {len(self._delta)} vectors "
                             f"({self.health.reason}); searches read them from the store")
            if self._needs_rebuild(base, self._delta):
                if self.background:
                    self._start_worker(dim)
                elif self.folder is not None and not self.health.waiting():
                    try:
                        with self._exclusive("build"):
                            self._build(dim, ann=self._wants_ann())
                    except Exception as exc:  # the delta answers; tried again after RETRY_S
                        self.health.failed(exc)
                    else:
                        self.health.ok()
                        return self.view(dim)
            return base, self._delta

    def _build_first(self, dim: int, base: VectorBase | None) -> VectorBase | None:
        """Build the base a search needs before answering (none usable, or `base` too far
        behind); IndexUnavailable when the build fails (tried again after health.RETRY_S)."""
        if self.health.waiting():
            raise IndexUnavailable(f"vector index: {self._damage or self.health.reason}")
        damage = self._damage
        try:
            with self._exclusive("build"):
                if self._current_base(dim) is base:
                    self._build(dim, ann=self._wants_ann_now())
                built = self._current_base(dim)
        except BaseException as exc:
            raise self.health.unavailable(exc, damage) from exc
        self.health.ok()
        if damage and base is None:
            notices.note(f"{damage}: rebuilt from the stored vectors")
        return built

    def suspect(self) -> None:
        """A search failed inside the base: open it again (its files checked) next time."""
        with self._lock:
            self._base, self._base_key = None, None

    def settle(self, dim: int) -> None:
        """After a bulk load: build now the base the next search would otherwise build
        before answering (its first vector search after 1M items waited 41 s)."""
        if self.must_build_first(dim):
            self.view(dim)

    def _current_base(self, dim: int) -> VectorBase | None:
        if self.folder is None:
            return None
        if not self._swept:
            self._swept = True
            self._sweep()
        row = self.source.published(self.NAME)
        if row is None or row[2] != dim:
            self._base, self._base_key = None, None
            return None
        if row == self._bad_key:
            return None
        if row == self._base_key and self._base is not None and not self._base.unchanged():
            self._base_key = None  # a file changed under its map: opened (and checked) again
        if row != self._base_key:
            try:
                self._base, self._base_key = self._open(row), row
                self._damage = None
            except BaseUnusable as exc:
                # Another process may have published a newer generation (and removed this
                # one) since the recorded row was read: read it again before giving up.
                again = self.source.published(self.NAME, fresh=True)
                try:
                    if again is None or again == row or again[2] != dim:
                        raise BaseUnusable(str(exc)) from exc
                    self._base, self._base_key = self._open(again), again
                    self._damage = None
                except BaseUnusable as unusable:  # not opened again until another is recorded
                    self._base, self._base_key = None, None
                    self._bad_key, self._damage = again or row, str(unusable)
        return self._base

    def _open(self, row: tuple[str, int, int]) -> VectorBase:
        assert self.folder is not None
        folder, measurement = vector_base.split_generation(row[0])
        return VectorBase.open(self.folder / folder, measurement=measurement)

    def _sweep(self) -> None:
        """Remove what no reader can want (a crash's or another process's leftovers), unless
        a build is under way somewhere (it holds the build lock)."""
        if self.folder is None or not self.folder.is_dir():
            return
        with contextlib.suppress(OSError), _try_lock(self.folder / "build.lock") as got:
            if got:
                row = self.source.published(self.NAME, fresh=True)
                self._remove_superseded(None if row is None else row[0])

    def _remove_superseded(self, current: str | None) -> None:
        """Every generation folder but `current`'s, and its measurements but the current one
        (under the build lock: nothing else is being written)."""
        assert self.folder is not None
        keep, measurement = vector_base.split_generation(current) if current else ("", 0)
        for entry in self.folder.iterdir():
            if entry.is_dir() and entry.name != keep:
                shutil.rmtree(entry, ignore_errors=True)
        if keep and (self.folder / keep).is_dir():
            wanted = vector_base.MEASURED.format(measurement)
            for entry in (self.folder / keep).iterdir():
                if entry.name.endswith(".tmp") or (
                        entry.name.startswith("measured-") and entry.name != wanted):
                    with contextlib.suppress(OSError):
                        entry.unlink()

    def _advance(self, delta: VectorDelta, dim: int) -> None:
        _, head = self.source.log_bounds()
        while delta.seq < head:
            changes, reached = self.source.vector_changes(delta.seq, 50_000)
            rowids = list(dict.fromkeys(r for _, r in changes))
            delta.update(rowids, self.source.vectors(rowids, dim))
            delta.seq = reached

    # -- rebuilding -----------------------------------------------------------------------------

    def _wants_ann(self) -> bool | None:
        # None ("auto"): the build decides once it has measured the codes (graph_due)
        return {"on": True, "off": False, "codes": False}.get(self.ann)

    def _wants_codes(self) -> bool | None:
        # "on" forces the graph, so it gets no rival; "codes" forces the codes.
        return {"on": False, "off": False, "codes": True}.get(self.ann)

    def _wants_ann_now(self) -> bool:
        # Only a forced graph is built before answering; "auto" adds it in the background.
        return self.ann == "on"

    def _needs_rebuild(self, base: VectorBase | None, delta: VectorDelta) -> bool:
        if self.folder is None or base is None:
            return False
        if len(delta) > max(DELTA_MIN, DELTA_SHARE * len(base)):
            return True
        return self._lacks_pass(base)

    def _lacks_pass(self, base: VectorBase) -> bool:
        """The base lacks a first pass the mode and its size call for, or is of an older
        format (vector_base.READABLE: it answers until the next generation replaces it)."""
        if base.outdated:
            return True
        if self.ann == "codes":
            return base.codes is None and len(base) > 0
        wanted = self._wants_ann()
        return base.incomplete if wanted is None else wanted and base.ann is None

    def _start_worker(self, dim: int) -> None:
        if self._closed or self.health.waiting() or (self._worker is not None and self._worker.is_alive()):
            return
        self._worker = threading.Thread(target=self._work, args=(dim,), name="hybridkb-vector-index",
                                        daemon=True)
        self._worker.start()

    def _work(self, dim: int) -> None:
        try:
            with self._exclusive("build", wait=False) as got:
                if got and not self._closed:
                    self._refresh(dim)
                    self.health.ok()
        except Exception as exc:  # the delta keeps the vectors; tried again after RETRY_S
            self.health.failed(exc)

    def _refresh(self, dim: int) -> None:
        """Under the build lock: measure the current base again when only the asked queries
        are new (no vector changed since it was built, no pass missing), else build."""
        base = self._current_base(dim)
        if base is not None and (base.codes is not None or base.ann is not None) \
                and not self._lacks_pass(base) \
                and not self._changed_after(base.seq, self.source.log_bounds()[1]):
            queries, through = self._asked(dim)
            if queries is not None:
                self._measure(base, queries, through)
                return
        self._build(dim, ann=self._wants_ann())

    def _measure(self, base: VectorBase, queries: Any, through: int) -> None:
        """Add a measurement of `base`'s passes on `queries` and record it (no new matrix)."""
        measured = vector_base.remeasure(base, queries, through)
        measurement = base.measurement + 1
        vector_base.write_measurement(base.folder, measurement, measured)
        name = vector_base.generation_name(base.folder.name, measurement)
        self.source.publish(self.NAME, name, base.seq, base.dim)
        self.measurements += 1
        self._remove_superseded(name)

    def _build(self, dim: int, *, ann: bool | None) -> None:
        """Write the next generation from the store and publish it (under the build lock)."""
        assert self.folder is not None
        _, head = self.source.log_bounds()  # read first: later writes stay in the delta
        generation = f"g{head:012d}-{uuid.uuid4().hex[:8]}"
        target = self.folder / generation
        make_index_root(self.folder.parent)
        self.folder.mkdir(exist_ok=True)
        vector_base.build(target, dim, head, self.source.iter_vectors(dim), self.source.vector_count(),
                          ann=ann, codes=self._wants_codes(), progress=self.progress,
                          cancelled=lambda: self._closed, asked=self._asked(dim))
        self.source.publish(self.NAME, generation, head, dim)
        self.builds += 1
        self._remove_superseded(generation)  # mapped files stay readable for whoever has them

    @contextlib.contextmanager
    def _exclusive(self, what: str, *, wait: bool = True) -> Iterator[bool]:
        if self.folder is None:
            yield True
            return
        make_index_root(self.folder.parent)
        self.folder.mkdir(exist_ok=True)
        if wait:
            with _file_lock(self.folder / f"{what}.lock"):
                yield True
            return
        with _try_lock(self.folder / f"{what}.lock") as got:
            yield got

    def build_now(self, dim: int) -> None:
        """Build and publish a new generation before returning (benchmarks, repair)."""
        if self.folder is None:
            return
        with self._lock, self._exclusive("build"):
            self._build(dim, ann=self._wants_ann())

    def optimize(self, dim: int) -> bool:
        """Build the next generation now when the current one lacks vectors written since,
        or the first pass its size calls for; True when one was built. Waits for a build another
        thread or process has under way, then looks again."""
        if self.folder is None:
            return False
        with self._lock, self._exclusive("build"):
            base = self._current_base(dim)
            _, head = self.source.log_bounds()
            pending = base is None or self._changed_after(base.seq, head)
            if not pending and not (base is not None and (self._lacks_pass(base)
                                                          or self._asked_since(base))):
                return False
            self._refresh(dim)
            return True

    def _asked(self, dim: int) -> tuple[Any, int]:
        """The store's recent query vectors (None when too few) and the newest one's seq."""
        try:
            return self.source.asked_queries(dim)
        except Exception:  # a store without the table (read-only, older): pseudo-queries
            return None, 0

    def _asked_since(self, base: VectorBase) -> bool:
        """Whether the store was asked MIN_ASKED queries since the base was measured on them
        (all it kept, when it was measured on pseudo-queries): optimize(), asked.py."""
        if base.ann is None and base.codes is None:
            return False  # exact scans: nothing to measure
        try:
            through = base.asked_through if base.asked else 0
            return self.source.asked_after(base.dim, through) >= asked.MIN_ASKED
        except Exception:
            return False

    def measure_on_asked(self, dim: int | None) -> None:
        """A base measured on pseudo-queries is built again in the background once the store
        has kept enough asked queries (asked.py): once; later, optimize() measures as more
        come."""
        if dim is None or self.folder is None or self._closed:
            return
        with self._lock:
            base = self._current_base(dim)
        if base is not None and not base.asked and self._asked_since(base):
            self._start_worker(dim)

    def summary(self, dim: int, built: bool) -> dict[str, Any]:
        """What optimize() reports about the current base."""
        base, _ = self.view(dim)
        return dict(vectors=0 if base is None else len(base), vector_seq=0 if base is None
                    else base.seq, graph=base is not None and base.ann is not None,
                    graph_used=base is not None and base.first_pass == "graph",
                    graph_recall=None if base is None else base.recall,
                    graph_ef=None if base is None or base.ann is None else base.ef,
                    codes_rescore=None if base is None else base.rescore,
                    # rows of the nearest cells a query scans (None: every row)
                    codes_scanned=None if base is None or base.cells is None or base.budget is None
                    or base.budget >= len(base) else base.budget,
                    codes_recall=None if base is None else base.codes_recall,
                    first_pass=None if base is None else base.first_pass,
                    measured_on_asked=0 if base is None else base.asked,
                    vector_base_built=built)

    def _changed_after(self, seq: int, head: int) -> bool:
        """Whether any vector change was logged after `seq` (up to `head`)."""
        return seq < head and bool(self.source.vector_changes(seq, 1)[0])

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background build to finish."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stop a background build at its next step (its files are removed) and wait for it."""
        self._closed = True
        worker = self._worker
        if worker is not None and worker.is_alive():
            worker.join(timeout)

    def problems(self, dim: int | None) -> list[str]:
        if self.folder is None or dim is None:
            return []
        row = self.source.published(self.NAME)
        if row is None:
            return []
        folder, _ = vector_base.split_generation(row[0])
        damage = verify.generation_problems(self.folder / folder, full=True)
        if damage:  # every file's checksum against the manifest its build wrote
            return [f"vector index is damaged: {p} (rebuilt from the stored vectors on the next "
                    "search, or `hybridkb check --repair`)" for p in damage]
        try:
            base = self._open(row)
        except BaseUnusable as exc:
            return [f"vector index: {exc} (rebuilt from the stored vectors on the next search)"]
        oldest, head = self.source.log_bounds()
        if base.seq < oldest - 1 or base.seq > head:
            return [f"vector index reflects change {base.seq}, which the log no longer joins"]
        return []


def _delta_ceiling(base: VectorBase) -> int:
    """Log entries past a base beyond which a search builds a new base first instead of
    reading them into memory as its delta (e.g. a re-embedding, a bulk load)."""
    return max(50_000, len(base) // 2)


@contextlib.contextmanager
def _try_lock(path: Path) -> Iterator[bool]:
    """A non-blocking exclusive lock: yields False when another holder has it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        yield True
        return
    handle: Any = open(path, "a+b")  # noqa: SIM115 - held for the block
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()
