"""The vector index of one store: a published base generation plus an exact delta.

The base (vector_base.py) is files written once and memory-mapped; the store records
which generation is current and the change-log sequence it reflects. Vectors written
after that sequence form the delta: read from the store by rowid, kept in memory and
searched exactly, their older versions in the base skipped. When the delta grows past a
few percent of the base, or the base lacks the graph its size calls for, a background
thread builds the next generation from the store and publishes it (rename, then one
row in the store), so writes and searches never wait for a graph build. Only a store
with no usable base at all builds one before answering (a flat copy, no graph).
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
import numpy.typing as npt

from ...progress import ProgressFactory, no_progress
from . import vector_base
from .sync import _file_lock
from .vector_base import BaseUnusable, RowIds, Vector, VectorBase

DELTA_MIN = 2_000  # the delta may grow to max(DELTA_MIN, DELTA_SHARE x base) before a rebuild
DELTA_SHARE = 0.05
ANN_MODES = ("auto", "on", "off")


class VectorSource(Protocol):
    store_id: str

    def log_bounds(self) -> tuple[int, int]: ...
    def vector_changes(self, seq: int, limit: int) -> tuple[list[tuple[int, int]], int]: ...
    def vectors(self, rowids: Sequence[int], dim: int) -> tuple[RowIds, Vector]: ...
    def iter_vectors(self, dim: int, batch_size: int = 4096) -> Iterator[tuple[RowIds, Vector]]: ...
    def vector_count(self) -> int: ...
    def published(self, name: str) -> tuple[str, int, int] | None: ...
    def publish(self, name: str, generation: str, seq: int, dim: int) -> None: ...


@dataclass(slots=True)
class VectorDelta:
    """Rowid -> its current vector (None: deleted or without one), for changes after `seq0`."""

    seq0: int
    seq: int
    vectors: dict[int, Vector | None] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.vectors)

    def live(self) -> tuple[RowIds, npt.NDArray[np.float32] | None]:
        rows = [(r, v) for r, v in self.vectors.items() if v is not None]
        if not rows:
            return np.zeros(0, dtype=np.int64), None
        return (np.array([r for r, _ in rows], dtype=np.int64),
                np.vstack([v for _, v in rows]).astype(np.float32))


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
        self.builds = 0

    # -- reading --------------------------------------------------------------------------------

    def view(self, dim: int) -> tuple[VectorBase | None, VectorDelta]:
        """The current base (None: everything is in the delta) and the delta after it."""
        with self._lock:
            base = self._current_base(dim)
            if base is None and self.folder is not None and self.source.vector_count() > 0:
                with self._exclusive("build"):
                    base = self._current_base(dim)
                    if base is None:
                        self._build(dim, ann=self._wants_ann_now())
                        base = self._current_base(dim)
            seq0 = base.seq if base is not None else 0
            if self._delta is None or self._delta.seq0 != seq0:
                self._delta = VectorDelta(seq0, seq0)
            self._advance(self._delta, dim)
            if self._needs_rebuild(base, self._delta):
                if self.background:
                    self._start_worker(dim)
                elif self.folder is not None:
                    with self._exclusive("build"):
                        self._build(dim, ann=self._wants_ann(self.source.vector_count()))
                    return self.view(dim)
            return base, self._delta

    def _current_base(self, dim: int) -> VectorBase | None:
        if self.folder is None:
            return None
        row = self.source.published(self.NAME)
        if row is None or row[2] != dim:
            self._base, self._base_key = None, None
            return None
        if row != self._base_key:
            try:
                self._base = VectorBase.open(self.folder / row[0])
                self._base_key = row
            except BaseUnusable:
                self._base, self._base_key = None, None
        return self._base

    def _advance(self, delta: VectorDelta, dim: int) -> None:
        _, head = self.source.log_bounds()
        while delta.seq < head:
            changes, reached = self.source.vector_changes(delta.seq, 50_000)
            rowids = list(dict.fromkeys(r for _, r in changes))
            found, matrix = self.source.vectors(rowids, dim)
            have = {int(r): matrix[i] for i, r in enumerate(found)}
            for r in rowids:
                delta.vectors[r] = have.get(r)
            delta.seq = reached

    # -- rebuilding -----------------------------------------------------------------------------

    def _wants_ann(self, n: int) -> bool | None:
        return {"on": True, "off": False}.get(self.ann, n >= vector_base.ANN_MIN_ROWS)

    def _wants_ann_now(self) -> bool:
        # Only a forced graph is built before answering; "auto" adds it in the background.
        return self.ann == "on"

    def _needs_rebuild(self, base: VectorBase | None, delta: VectorDelta) -> bool:
        if self.folder is None or base is None:
            return False
        if len(delta) > max(DELTA_MIN, DELTA_SHARE * len(base)):
            return True
        return bool(self._wants_ann(len(base))) and base.ann is None

    def _start_worker(self, dim: int) -> None:
        if self._closed or (self._worker is not None and self._worker.is_alive()):
            return
        self._worker = threading.Thread(target=self._work, args=(dim,), name="hybridkb-vector-index",
                                        daemon=True)
        self._worker.start()

    def _work(self, dim: int) -> None:
        with contextlib.suppress(Exception), self._exclusive("build", wait=False) as got:
            if got and not self._closed:
                self._build(dim, ann=self._wants_ann(self.source.vector_count()))

    def _build(self, dim: int, *, ann: bool | None) -> None:
        """Write the next generation from the store and publish it (under the build lock)."""
        assert self.folder is not None
        _, head = self.source.log_bounds()  # read first: later writes stay in the delta
        generation = f"g{head:012d}-{uuid.uuid4().hex[:8]}"
        target = self.folder / generation
        self.folder.mkdir(parents=True, exist_ok=True)
        vector_base.build(target, dim, head, self.source.iter_vectors(dim), self.source.vector_count(),
                          ann=ann, progress=self.progress)
        old = self.source.published(self.NAME)
        self.source.publish(self.NAME, generation, head, dim)
        self.builds += 1
        for stale in self.folder.iterdir():  # mapped files stay readable for whoever has them
            if stale.name not in (generation, old[0] if old else "") and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)

    @contextlib.contextmanager
    def _exclusive(self, what: str, *, wait: bool = True) -> Iterator[bool]:
        if self.folder is None:
            yield True
            return
        self.folder.mkdir(parents=True, exist_ok=True)
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
            self._build(dim, ann=self._wants_ann(self.source.vector_count()))

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background build to finish."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def close(self) -> None:
        self._closed = True

    def problems(self, dim: int | None) -> list[str]:
        if self.folder is None or dim is None:
            return []
        row = self.source.published(self.NAME)
        if row is None:
            return []
        try:
            base = VectorBase.open(self.folder / row[0])
        except BaseUnusable as exc:
            return [f"vector index: {exc} (rebuilt from the stored vectors on the next search)"]
        oldest, head = self.source.log_bounds()
        if base.seq < oldest - 1 or base.seq > head:
            return [f"vector index reflects change {base.seq}, which the log no longer joins"]
        return []


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


Scored = list[tuple[int, float]]


def _top(rowids: RowIds, scores: Vector, k: int) -> Scored:
    if k <= 0 or rowids.size == 0:
        return []
    if k < scores.size:
        idx = np.argpartition(-scores, k - 1)[:k]
        rowids, scores = rowids[idx], scores[idx]
    return [(int(r), float(s)) for r, s in zip(rowids, scores, strict=True)]


def _merge(parts: list[Scored], limit: int) -> Scored:
    merged = [p for part in parts for p in part]
    merged.sort(key=lambda p: (-p[1], p[0]))
    return merged[:limit]


def knn(
    base: VectorBase | None, delta: VectorDelta, query: Vector, limit: int, *,
    rows: RowIds | None, check: Any, all_rows: Any,
) -> Scored:
    """Top `limit` (rowid, cosine) over base and delta.

    `rows` (sorted): the only rowids allowed, scanned exactly (a filter's rows). Without
    it, candidates come best first from the graph (or an exact scan of the base) and
    `check(rowids) -> set` keeps those the filters allow; when too few survive the
    over-fetch grows, and past a few rounds `all_rows()` gives the allowed rows for an
    exact scan instead (over-fetching cannot hold recall under a narrow filter).
    """
    d_rows, d_matrix = delta.live()
    changed = np.fromiter(delta.vectors.keys(), dtype=np.int64, count=len(delta.vectors))
    d_scores = d_matrix @ query if d_matrix is not None else np.zeros(0, dtype=np.float32)
    if rows is not None:
        parts: list[Scored] = []
        if base is not None and len(base):
            allowed = rows[~np.isin(rows, changed)] if changed.size else rows
            parts.append(_top(*base.exact(query, base.positions(allowed)), limit))
        if d_rows.size:
            keep = np.isin(d_rows, rows)
            parts.append(_top(d_rows[keep], d_scores[keep], limit))
        return _merge(parts, limit)
    parts = []
    if d_rows.size:
        ok = check([int(r) for r in d_rows])
        keep = np.fromiter((int(r) in ok for r in d_rows), dtype=bool, count=d_rows.size)
        parts.append(_top(d_rows[keep], d_scores[keep], limit))
    if base is not None and len(base):
        full = None if base.ann is not None else base.exact(query, None)
        count = 2 * limit + int(changed.size) + 10
        skip = set(changed.tolist())
        for _ in range(4):
            if full is not None:
                cand = _top(full[0], full[1], min(count, len(base)))
            else:
                cand = [(int(r), float(s)) for r, s in zip(*base.nearest(query, count), strict=True)]
            cand = [(r, s) for r, s in cand if r not in skip] if skip else cand
            ok = check([r for r, _ in cand])
            kept = [(r, s) for r, s in cand if r in ok]
            if len(kept) >= limit or count >= len(base):
                parts.append(kept)
                return _merge(parts, limit)
            count *= 4
        rows = np.asarray(sorted(all_rows()), dtype=np.int64)
        return knn(base, delta, query, limit, rows=rows, check=check, all_rows=all_rows)
    return _merge(parts, limit)
