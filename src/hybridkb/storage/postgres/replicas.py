"""Searches on PostgreSQL streaming replicas, writes on the primary.

Each replica gets a small pool of its own, opened without waiting (a replica that is down
when the store opens is only a warning). Retrievals go to the replicas in turn; a replica
whose connection fails is skipped, with a warning, for RETRY_AFTER_S seconds, and the
query runs on the next one or on the primary. A query cancelled by the replica because
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

RETRY_AFTER_S = 30.0  # a failed replica is left alone this long
_POLL_S = 0.005
_CAUGHT_UP = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
# A replica's own failures, as opposed to a bad query (which fails on the primary too).
_REPLICA_FAILURES = (psycopg.OperationalError, pg_errors.SerializationFailure,
                     pg_errors.AdminShutdown, pg_errors.CannotConnectNow)


class Replica:
    """One streaming replica: its pool and whether it is left alone for now."""

    def __init__(self, url: str, *, connect_kwargs: dict[str, Any], configure: Callable[..., None],
                 timeout: float, max_size: int) -> None:
        self.url = redact(url)
        self.down_until = 0.0
        self.pool: ConnectionPool[Connection[Any]] = ConnectionPool(
            url, kwargs=connect_kwargs, min_size=1, max_size=max_size, configure=configure,
            timeout=timeout, name=f"hybridkb-replica {self.url}", open=False)
        self.pool.open(wait=False)

    def fail(self, reason: object) -> None:
        self.down_until = time.monotonic() + RETRY_AFTER_S
        log.warning("hybridkb: replica %s skipped for %.0f s: %s", self.url, RETRY_AFTER_S,
                    " ".join(str(reason).split()) or type(reason).__name__)
        self.pool.check()  # drop its dead connections now

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
        return [r for r in turn if r.down_until <= now]

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
                    return True, work(conn)
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
