"""Searches on PostgreSQL streaming replicas, writes on the primary.

Each replica gets a small pool of its own, opened without waiting (a replica that is down
when the store opens is only a warning). Retrievals go to the replicas in turn; a replica
whose connection fails is skipped for RETRY_AFTER_S seconds, then twice as long each time
it still fails (one warning per outage), and the query runs on the next one or on the
primary. A query cancelled by the replica because
of a conflict with recovery (hot standby) is run again on the primary.

Read-your-writes: the backend remembers the primary's WAL position after each of its
writes; with `read_your_writes=True` a replica answers only once it has replayed that
position (pg_last_wal_replay_lsn(), polled for up to `replica_wait` seconds), else the
primary answers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from .driver import redact

if TYPE_CHECKING:
    from psycopg import Connection

T = TypeVar("T")
log = logging.getLogger("hybridkb")

RETRY_AFTER_S = 30.0  # a failed replica is left alone this long, then twice as long...
MAX_RETRY_AFTER_S = 600.0  # ...up to this
_POLL_S = 0.005
_CAUGHT_UP = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
# A replica's own failures, as opposed to a bad query (which fails on the primary too).
_REPLICA_FAILURES = (psycopg.OperationalError, pg_errors.SerializationFailure,
                     pg_errors.AdminShutdown, pg_errors.CannotConnectNow)
_POOL_NAME = "hybridkb-replica "


class _QuietReplicaPools(logging.Filter):
    """psycopg_pool warns on every failed connection attempt of a pool; for a replica's
    pool `Replica` says it once per outage instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _POOL_NAME not in str(record.msg) and not any(
            _POOL_NAME in str(arg) for arg in (record.args if isinstance(record.args, tuple) else ()))


_QUIET = _QuietReplicaPools()


class Replica:
    """One streaming replica: its pool and whether it is left alone for now.

    While it is down its pool is closed (no reconnect attempts in the background); it is
    tried again after RETRY_AFTER_S, then after twice as long each time it still fails,
    with one warning per outage and one line when it answers again."""

    def __init__(self, url: str, *, connect_kwargs: dict[str, Any], configure: Callable[..., None],
                 timeout: float, max_size: int) -> None:
        logging.getLogger("psycopg.pool").addFilter(_QUIET)  # once: a logger keeps a filter once
        self.url = redact(url)
        self.down_until = 0.0
        self.failures = 0  # in a row: 0 while it answers
        self._down_since = 0.0
        self._lock = threading.Lock()
        self._options: dict[str, Any] = {
            "kwargs": connect_kwargs, "min_size": 1, "max_size": max_size, "configure": configure,
            "timeout": timeout, "name": _POOL_NAME + self.url, "open": False}
        self._dsn = url
        self.pool = self._make()
        self.pool.open(wait=False)

    def _make(self) -> ConnectionPool[Connection[Any]]:
        return ConnectionPool(self._dsn, **self._options)

    def available(self, now: float) -> bool:
        """Whether to try it now (its pool opened again once a wait is over)."""
        if self.down_until > now:
            return False
        with self._lock:
            if self.pool.closed:
                self.pool = self._make()
                self.pool.open(wait=False)
        return True

    def fail(self, reason: object) -> None:
        now = time.monotonic()
        with self._lock:
            if self.down_until > now:
                return  # another search saw the same failure
            self.failures += 1
            wait = min(MAX_RETRY_AFTER_S, RETRY_AFTER_S * 2 ** (self.failures - 1))
            self.down_until = now + wait
            why = " ".join(str(reason).split()) or type(reason).__name__
            if self.failures == 1:
                self._down_since = now
                log.warning("hybridkb: replica %s skipped (unreachable): searches go to the other "
                            "servers; tried again in %g s, then less often: %s", self.url, wait, why)
            else:
                log.debug("hybridkb: replica %s still unreachable after %.0f s; tried again in "
                          "%g s: %s", self.url, now - self._down_since, wait, why)
            pool = self.pool
        pool.close(timeout=0)  # no reconnect attempts while it is left alone

    def answered(self) -> None:
        if self.failures:
            with self._lock:
                if self.failures:
                    log.warning("hybridkb: replica %s answers again (after %.0f s)", self.url,
                                time.monotonic() - self._down_since)
                    self.failures = 0

    def close(self) -> None:
        self.pool.close()


class Replicas:
    """The replicas of one store, used in turn."""

    def __init__(self, urls: Sequence[str], *, connect_kwargs: dict[str, Any],
                 configure: Callable[..., None], timeout: float, max_size: int,
                 read_your_writes: bool, wait: float) -> None:
        self.read_your_writes = read_your_writes
        self.wait = wait
        self._next = 0
        self._lock = threading.Lock()
        self.last_write_lsn: str | None = None
        self.replicas = [Replica(u, connect_kwargs=connect_kwargs, configure=configure,
                                 timeout=timeout, max_size=max_size) for u in urls]

    def _order(self) -> list[Replica]:
        now = time.monotonic()
        with self._lock:
            start = self._next
            self._next = (self._next + 1) % max(1, len(self.replicas))
        turn = self.replicas[start:] + self.replicas[:start]
        return [r for r in turn if r.available(now)]

    def noted_write(self, lsn: str) -> None:
        self.last_write_lsn = lsn

    def _caught_up(self, conn: Connection[Any]) -> bool:
        lsn = self.last_write_lsn
        if not self.read_your_writes or lsn is None:
            return True
        deadline = time.monotonic() + self.wait
        while True:
            row = conn.execute(_CAUGHT_UP, [lsn]).fetchone()
            if row is not None and row[0]:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def run(self, work: Callable[[Connection[Any]], T]) -> tuple[bool, T | None]:
        """(True, result) from the first replica that answers, or (False, None) when the
        primary must: none is up, none caught up in time, or each one failed."""
        for replica in self._order():
            try:
                with replica.pool.connection(timeout=min(2.0, replica.pool.timeout)) as conn:
                    if not self._caught_up(conn):
                        return False, None
                    result = work(conn)
                replica.answered()
                return True, result
            except PoolTimeout as exc:
                replica.fail(exc)
            except _REPLICA_FAILURES as exc:
                if isinstance(exc, pg_errors.SerializationFailure):  # recovery conflict
                    return False, None
                replica.fail(exc)
            except psycopg.Error:
                return False, None  # the primary answers (or raises the same error, mapped)
        return False, None

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()


def wal_position(conn: Connection[Any]) -> str:
    """The primary's WAL insert position: past the commit record of the last write even
    before it is written out (pg_current_wal_lsn() lags it when synchronous_commit is off)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return str(row[0]) if row else "0/0"
