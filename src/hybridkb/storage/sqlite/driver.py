"""SQLite connection handling: the sqlite3 module able to load sqlite-vec, and migrations.

sqlite-vec is loaded for stores made before migration 009, whose vectors were in a `vec0`
table that only the extension can read and drop (the migration moves them to a plain one).

The stdlib module when it can load extensions; otherwise `sqlean.py`, a
drop-in sqlite3 with extension loading (pyenv builds lack it).
"""

from __future__ import annotations

import functools
import re
import sqlite3 as _stdlib
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ... import textquery
from ...errors import BackendUnavailableError, StoreError
from .. import migrations, textcodec
from . import tables

_driver: ModuleType | None = None


def _can_load_extensions(module: ModuleType) -> bool:
    conn = module.connect(":memory:")
    try:
        return hasattr(conn, "enable_load_extension")
    finally:
        conn.close()


def driver() -> ModuleType:
    global _driver
    if _driver is None:
        if _can_load_extensions(_stdlib):
            _driver = _stdlib
        else:
            try:
                import sqlean
            except ImportError as exc:
                raise BackendUnavailableError(
                    "this Python's sqlite3 cannot load extensions and sqlean.py is missing: "
                    "pip install sqlean.py"
                ) from exc
            _driver = sqlean
        _bind_cheaply(_driver)
    return _driver


def _bind_cheaply(module: ModuleType) -> None:
    """Adapters that bind bytes, None and bool as they would bind anyway, but at a dict
    lookup's cost. Only exact int, float, str and bytearray skip the module's adaptation
    protocol; every other parameter looks for `__adapt__` and `__conform__` first, which in
    sqlean.py raises and clears an AttributeError each time: 1.5 us a bytes parameter and
    1.0 us a NULL, against 0.38 and 0.12 with these (a row of add_many binds ten or more)."""
    module.register_adapter(bytes, bytes)  # bytes(b) is b itself
    module.register_adapter(type(None), {}.get)  # {}.get(None) is None
    module.register_adapter(bool, int)  # what binding a bool stores: 0 or 1


def enable_wal(conn: Any, timeout: float) -> None:
    """`PRAGMA journal_mode = WAL`, asked again while another connection holds the lock it
    needs: SQLite answers "database is locked" at once there, without its busy handler
    (processes racing to create one store met it under load)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except driver().OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


# A new store's page size. At SQLite's default 4 KB a page holds two 1,536-byte vectors of the
# vector table (a quarter of it empty); at 8 KB, five. 100k benchmark items, two alternate
# pairs: 4,365 -> 3,685 bytes an item, ingest 2,797 / 2,852 -> 2,976 / 2,996 items/s, first-time
# searches no slower (2026-11-27; git history of docs/benchmarks.md).
PAGE_SIZE = 8192


def connect(path: str, *, timeout: float) -> Any:
    """Open a connection with sqlite-vec loaded, in autocommit mode (we BEGIN ourselves)."""
    module = driver()
    conn = module.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except Exception as exc:
        conn.close()
        raise BackendUnavailableError(f"cannot load the sqlite-vec extension: {exc}") from exc
    # Only a new, empty file takes it (an existing store keeps the size it was made with).
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    conn.create_function("regexp", 2, _regexp, deterministic=True)
    # What the FTS5 index of migration 002 read (004 drops it for tantivy): CJK runs as bigrams.
    conn.create_function("hybridkb_fts", 1, _fts_text, deterministic=True)
    conn.create_function("hybridkb_substring_hits", 3, _substring_hits(), deterministic=True)
    return conn


def _fts_text(value: object) -> object:
    return textquery.cjk_expand(value) if isinstance(value, str) else value


def _substring_hits() -> Callable[[object, object, str], int]:
    """SQLite's `hybridkb_substring_hits(text, title, words)`, one per connection: how many
    of the words (joined by SUBSTRING_SEP, lowercase) each of the stored text (packed or
    plain, textcodec.py) and the title holds, lowercased. Each text is unpacked once: a
    row is asked twice in a row (its WHERE, then its result column), the second time
    answered from the first."""
    last: list[Any] = [None, None, None, 0]

    def hits(text: object, title: object, words: str) -> int:
        if last[0] == text and last[1] == title and last[2] == words:
            return int(last[3])
        body, head = textcodec.lowered(text), textcodec.lowered(title)
        n = sum((w in body) + (w in head) for w in _split_words(words))
        last[:] = [text, title, words, n]
        return n

    return hits


SUBSTRING_SEP = "\x1f"  # never inside a word (textquery.plain_words: \w runs)


@functools.lru_cache(maxsize=64)
def _split_words(words: str) -> tuple[str, ...]:
    return tuple(w for w in words.split(SUBSTRING_SEP) if w)


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _regexp(pattern: str | None, value: object) -> bool:
    """SQLite's `value REGEXP pattern` (path filters): a Python regex search."""
    if not isinstance(pattern, str) or not isinstance(value, str):
        return False
    return _compiled(pattern).search(value) is not None


def errors() -> tuple[type[Exception], type[Exception]]:
    """(OperationalError, DatabaseError) of the chosen driver."""
    module = driver()
    return module.OperationalError, module.DatabaseError


def integrity_error() -> type[Exception]:
    """The chosen driver's IntegrityError (a constraint, such as a duplicate id)."""
    error: type[Exception] = driver().IntegrityError
    return error


# Migrations whose work depends on what the store holds: run after the file of that name.
_PYTHON_STEPS: dict[str, Callable[[Any], object]] = {"009_plain_vectors": tables.plain_vectors,
                                                      "011_half_vectors": tables.half_vectors,
                                                      "012_packed_text": tables.pack_texts,
                                                      "013_int8_vectors": tables.int8_vectors,
                                                      "014_binary_hashes": tables.binary_hashes}


def migrate(conn: Any) -> str | None:
    """Apply the pending migrations, each recorded by name, inside the caller's transaction.

    A store of a newer schema is left as it is: the reason it must not be written is returned.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(name TEXT PRIMARY KEY, applied_at REAL NOT NULL DEFAULT (unixepoch('subsec')))"
    )
    done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
    if newer := migrations.newer_schema(done, "sqlite"):
        return newer
    for name, sql in migrations.load("sqlite"):
        if name in done:
            continue
        for statement in split_sql(sql):
            conn.execute(statement)
        if name in _PYTHON_STEPS:
            _PYTHON_STEPS[name](conn)
        conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
    return None


def split_sql(script: str) -> list[str]:
    """Split a migration into statements; trigger bodies end with END;."""
    statements: list[str] = []
    current: list[str] = []
    in_trigger = False
    for line in script.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        upper = stripped.upper()
        if upper.startswith("CREATE TRIGGER"):
            in_trigger = True
        if (in_trigger and upper == "END;") or (not in_trigger and stripped.endswith(";")):
            statements.append("\n".join(current))
            current, in_trigger = [], False
    if current:
        statements.append("\n".join(current))
    return statements


# SQLite's own words for a full disk and for a damaged file.
_FULL = ("database or disk is full", "disk i/o error", "no space left")
_DAMAGED = ("malformed", "file is not a database", "corrupt", "could not fetch vector")
DAMAGED = "database file is damaged: run `hybridkb check`"


def is_damage(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(word in text for word in _DAMAGED) and not any(word in text for word in _FULL)


def store_error(exc: BaseException, doing: str) -> StoreError:
    """A driver error as the StoreError that names its cause: disk full, damaged, or `doing` failed."""
    text = str(exc)
    lowered = text.lower()
    if any(word in lowered for word in _FULL):
        return StoreError(f"disk full: {doing} failed and nothing of it was written; free some space "
                          f"(or raise the file system's quota) and try again ({text})")
    if is_damage(exc):
        return StoreError(f"{DAMAGED} ({doing}: {text})")
    return StoreError(f"{doing} failed: {text}")
