"""Checking and repairing one SQLite store, so damage is reported and fixed, never hidden.

The items are the system of record; the vectors' `embedded_hash` bookkeeping derives from
them and can be rebuilt here (the derived search indexes are rebuilt by the backend).
`integrity_problems` lists what disagrees (each check on its own, so one damaged table does
not hide the others); `repair` rebuilds the derived parts inside the caller's transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ...errors import StoreError
from .. import records

Read = Callable[[str], list[Any]]

# Corpora whose kept count (migration 010) differs from their items, either way round.
COUNTS_DISAGREE = (
    "SELECT count(*) FROM (SELECT corpus, count(*) AS n FROM items GROUP BY corpus) i "
    "FULL JOIN (SELECT corpus, n FROM corpus_counts WHERE n != 0) c ON c.corpus = i.corpus "
    "WHERE i.n IS NOT c.n")


CHECKPOINT_PAGES = 1000  # SQLite's default: WAL pages between automatic checkpoints
# While add_many writes (SQLiteBackend.bulk_writes): 128 MB of 8 KB pages. Each 256-item
# commit of a large load dirties ~256 leaf pages of the id index at random (ids in no
# order, as UUIDs are), so at the default interval a checkpoint, with its fsync, ran every
# ~4 commits and wrote the same pages again each time. Items-shaped rows, 1M inserts in
# 256-row transactions (two alternate pairs, 2026-11-29): 59 / 39 s and 25.6 /
# 22.9 s of CPU at 1000 pages, 24 / 23 s and 18.4 / 17.8 s at 16,384. The WAL file grows to
# about this size during the load and is cut after it (truncate_wal).
BULK_CHECKPOINT_PAGES = 16_384


@contextmanager
def bulk_checkpoints(conn: Any, lock: AbstractContextManager[Any]) -> Iterator[None]:
    """SQLite's automatic checkpoints every BULK_CHECKPOINT_PAGES inside, the default after."""
    with lock:
        conn.execute(f"PRAGMA wal_autocheckpoint = {BULK_CHECKPOINT_PAGES}")
    try:
        yield
    finally:
        with lock:
            conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")


WAL_CUT_BYTES = 4 << 20  # a WAL this large after a bulk write is cut (SQLite's own
# checkpoints, every 1000 pages, restart it but keep its file at the largest it grew to)


def truncate_wal(conn: Any, path: str, busy_timeout_ms: int) -> bool:
    """After a bulk write, outside a transaction: once the WAL has grown past WAL_CUT_BYTES
    (a large load: 9 MB after 100k items, kept until the last connection closes), its
    pages copied into the file and the WAL cut to nothing. A small write costs one stat.
    Never waits: while another connection reads, the WAL is left as it is. Returns whether
    it was cut."""
    try:
        if os.stat(f"{path}-wal").st_size < WAL_CUT_BYTES:
            return False
    except OSError:
        return False
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    return not busy


RECLAIM_SHARE = 0.25  # free pages, as a share of the file, that `optimize` hands back
# Set by a migration that shrank rows in place (012's packed texts): their pages stay, half
# empty, and not on the free list (100k items: 90 of 195 MB of the items' pages unused).
META_VACUUM_DUE = "vacuum_due"


def reclaim(conn: Any) -> int:
    """`hybridkb optimize`, outside a transaction: when a migration shrank rows in place
    (META_VACUUM_DUE) or a quarter of the file or more is free pages (many deletes: SQLite
    only reuses them for later writes), VACUUM writes the file anew, compact. Rowids stay
    (every table that others refer to by rowid declares it). Returns the bytes returned."""
    due = conn.execute("SELECT 1 FROM meta WHERE key = ?", (META_VACUUM_DUE,)).fetchone()
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    if not pages or (due is None and free < pages * RECLAIM_SHARE):
        return 0
    size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute("VACUUM")
    conn.execute("DELETE FROM meta WHERE key = ?", (META_VACUUM_DUE,))
    return max(0, pages - int(conn.execute("PRAGMA page_count").fetchone()[0])) * size


def integrity_problems(read: Read, vector_dim: int | None) -> list[str]:
    """SQLite's integrity check and items / vectors agreeing by rowid. The derived search
    indexes beside the file are checked by the backend (storage/indexes/)."""
    problems: list[str] = []
    try:
        problems += [f"sqlite: {r[0]}" for r in read("PRAGMA integrity_check") if r[0] != "ok"]
    except StoreError as exc:
        problems.append(f"sqlite: the integrity check cannot run: {_cause(exc)}")
    checks: list[tuple[str, str]] = [("corpora whose item count disagrees with the items", COUNTS_DISAGREE)]
    if vector_dim is not None:
        checks += records.vector_checks("vec_items", "i.rowid IN (SELECT rowid FROM vec_items)")
    for label, sql in checks:
        try:
            n = int(read(sql)[0][0])
        except StoreError as exc:
            problems.append(f"{label}: cannot be counted: {_cause(exc)}")
            continue
        if n:
            problems.append(f"{n} {label}")
    return problems


def repair(conn: Any, vector_dim: int | None, problems: Sequence[str], create_vectors: str) -> list[str]:
    """Rebuild, in the caller's transaction, what derives from the items; returns what was done.

    Indexes of the items table (REINDEX), the corpora's item counts, and the vectors:
    orphans dropped, items whose vector is missing or not theirs marked for embedding again;
    a vector table too damaged to read is recreated empty and every item marked.
    """
    done: list[str] = []
    text = " ".join(problems).lower()
    if "sqlite:" in text:
        _step(conn, done, "rebuilt the items table's indexes (REINDEX)", "REINDEX")
    if "sqlite:" in text or "item count" in text:
        _step(conn, done, "counted each corpus's items again", "DELETE FROM corpus_counts",
              "INSERT INTO corpus_counts (corpus, n) SELECT corpus, count(*) FROM items GROUP BY corpus")
    if vector_dim is None or not ("sqlite:" in text or "vector" in text):
        return done
    try:
        conn.execute("SELECT count(embedding) FROM vec_items").fetchone()  # every vector reads
        orphans = conn.execute("DELETE FROM vec_items WHERE rowid NOT IN (SELECT rowid FROM items)").rowcount
        foreign = conn.execute("DELETE FROM vec_items WHERE rowid IN "
                               "(SELECT rowid FROM items WHERE embedded_hash IS NULL)").rowcount
        missing = conn.execute("UPDATE items SET embedded_hash = NULL WHERE embedded_hash IS NOT NULL "
                               "AND rowid NOT IN (SELECT rowid FROM vec_items)").rowcount
        done.append(f"vectors: dropped {orphans} without an item and {foreign} of items not marked "
                    f"embedded; {missing} items without a vector marked for embedding")
    except Exception as exc:  # the vector table itself may be damaged
        recreated = _step(conn, done, "recreated the vector table empty (it could not be read: "
                          f"{exc}) and marked every item for embedding",
                          "DROP TABLE IF EXISTS vec_items", create_vectors,
                          "UPDATE items SET embedded_hash = NULL")
        if not recreated:
            done.append("the vectors could not be repaired")
    return done


def _step(conn: Any, done: list[str], what: str, *statements: str) -> bool:
    """Run one repair step under a savepoint: a step the damage defeats is undone and reported."""
    conn.execute("SAVEPOINT repair_step")
    try:
        for sql in statements:
            conn.execute(sql)
    except Exception as exc:  # any driver error: report it, try the next step
        conn.execute("ROLLBACK TO repair_step")
        conn.execute("RELEASE repair_step")
        done.append(f"could not: {what.split(' (')[0]} ({exc})")
        return False
    conn.execute("RELEASE repair_step")
    done.append(what)
    return True


def _cause(exc: BaseException) -> str:
    """The driver's own words, without the advice the StoreError wraps them in."""
    return str(exc.__cause__ or exc)
