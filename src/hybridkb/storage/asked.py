"""The vectors of the queries a store is asked, kept as a bounded sample.

A vector index's recall depends on where the queries sit: the same IVFFlat index held
recall@10 0.96-0.99 for SciFact's and LoCoMo's test queries at the probes pseudo-queries
measured, and 0.875 for NFCorpus's, whose queries sit farther from the items than any
pseudo-query made from the items (docs/postgres.md, "Vector search"). So a store keeps the
vectors (never the text) of the last KEEP queries it was asked, in the `query_vectors`
table, and each build of a vector index measures its effort (IVFFlat probes, the
one-bit codes' rescore depth, the graph's breadth) on them once there are MIN_ASKED,
instead of on pseudo-queries. The write that brings the store to MIN_ASKED has the index
it has measured on them once (PostgreSQL's probes on that write's thread, SQLite's base
built again in the background); `optimize()` measures again once MIN_ASKED more have come.

Searches never wait for this: a KnowledgeBase buffers the vectors and a worker thread
writes them FLUSH at a time, in a transaction of their own; a failed write (a read-only
store, a replica, a busy file) drops them. `hybridkb.open(..., sample_queries=False)`
keeps none.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import numpy.typing as npt

from . import codec
from .workers import Workers

KEEP = 512  # the most recent distinct query vectors a store keeps
FLUSH = 16  # vectors buffered before a write
MIN_ASKED = 50  # asked queries a measurement needs before it trusts them over pseudo-queries
# The most recent asked queries a measurement uses: recall@10 varies a lot between queries
# (on the benchmark's 1M items at 40 probes, 0.977 for one half of its queries, 0.933 for the
# other), and 100 queries measured within +-0.02 of their set, 300 within about +-0.01.
MEASURED = 300

Row = tuple[int, int, bytes]  # digest, dimension, float32 bytes


def insert_sql(mark: str) -> str:
    """One row; a vector asked before (the same digest) is not kept twice."""
    return (f"INSERT INTO query_vectors (digest, dim, vector, asked_at) VALUES "
            f"({mark}, {mark}, {mark}, {mark}) ON CONFLICT (digest) DO NOTHING")


def trim_sql(mark: str) -> str:
    """Drop all but the last KEEP rows (bound: KEEP - 1). By place, not by seq: a vector
    asked twice used up a seq on both dialects without a row."""
    return (f"DELETE FROM query_vectors WHERE seq < "
            f"(SELECT seq FROM query_vectors ORDER BY seq DESC LIMIT 1 OFFSET {mark})")


def recent_sql(mark: str) -> str:
    """(seq, vector) of the last vectors of one dimension, newest first (bound: dimension,
    how many: MEASURED)."""
    return (f"SELECT seq, vector FROM query_vectors WHERE dim = {mark} "
            f"ORDER BY seq DESC LIMIT {mark}")


def count_after_sql(mark: str) -> str:
    """How many vectors of one dimension came after a seq (bound: dimension, seq)."""
    return f"SELECT count(*) FROM query_vectors WHERE dim = {mark} AND seq > {mark}"


def keep(cursor: Any, rows: Sequence[Row], now: float, mark: str) -> None:
    """Write `rows` and trim the table to KEEP, in the caller's transaction."""
    cursor.executemany(insert_sql(mark), [(*r, now) for r in rows])
    cursor.execute(trim_sql(mark), (KEEP - 1,))


def row(vector: Any) -> Row | None:
    """A query vector as a row to keep; None when it has no direction (nothing to measure)."""
    v = codec.as_array(vector)
    if v.size == 0 or not np.all(np.isfinite(v)) or not np.any(v):
        return None
    raw = codec.to_blob(v)
    digest = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True)
    return digest, int(v.size), raw


def decode(rows: Sequence[tuple[Any, Any]], dim: int) -> tuple[npt.NDArray[np.float32] | None, int]:
    """(the unit query vectors of `recent_sql` rows, or None when fewer than MIN_ASKED;
    the newest seq among them, 0 when none)."""
    newest = max((int(r[0]) for r in rows), default=0)
    blobs = [bytes(r[1]) for r in rows if len(bytes(r[1])) == 4 * dim]
    if len(blobs) < MIN_ASKED:
        return None, newest
    matrix = codec.matrix_from_blobs(blobs, dim)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: npt.NDArray[np.float32] = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
    return out, newest


class QuerySampler:
    """Buffers the vectors a KnowledgeBase embeds for its searches and hands them, FLUSH at
    a time, to `keep(rows, closing)` (the backend's write) on a worker thread; `closing`
    is True for the last ones, written as the store closes."""

    def __init__(self, keep: Callable[[Sequence[Row], bool], None], *, enabled: bool = True) -> None:
        self._keep = keep
        self.enabled = enabled
        self._pending: list[Row] = []
        self._lock = threading.Lock()
        self._writing: list[Future[None]] = []
        self.dropped = 0  # vectors a failed write lost (a read-only store, a busy file)

    def noting(self, embed: Callable[[str], Any]) -> Callable[[str], Any]:
        """`embed`, each vector it returns noted."""
        if not self.enabled:
            return embed

        def embed_and_note(query: str) -> Any:
            vector = embed(query)
            self.note(vector)
            return vector
        return embed_and_note

    def note(self, vector: Any) -> None:
        if not self.enabled:
            return
        kept = row(vector)
        if kept is None:
            return
        with self._lock:
            self._pending.append(kept)
            if len(self._pending) < FLUSH:
                return
            batch, self._pending = self._pending, []
            self._writing = [f for f in self._writing if not f.done()]
            self._writing.append(_writer.pool().submit(self._write, batch, False))

    def flush(self) -> None:
        """Wait for the writes under way, then write what is buffered on the caller's thread
        (close(): before the backend's connections go)."""
        with self._lock:
            batch, self._pending = self._pending, []
            writing, self._writing = self._writing, []
        for future in writing:
            future.result()
        if batch:
            self._write(batch, True)

    def _write(self, batch: list[Row], closing: bool) -> None:
        try:
            self._keep(batch, closing)
        except Exception as exc:  # a sample is never worth an error
            self.dropped += len(batch)
            logging.getLogger("hybridkb").debug("query vectors not kept: %s", exc)


_writer = Workers(1, "hybridkb-asked")
