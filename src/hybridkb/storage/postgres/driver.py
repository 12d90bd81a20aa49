"""PostgreSQL connection handling shared by every store: the URL users see, and migrations.

psycopg is imported inside `migrate`: the dialect checks first that the optional extra
is installed, and this module must import without it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ... import validation
from ...errors import BackendUnavailableError, StoreError
from .. import migrations

MIN_PGVECTOR = (0, 8, 0)  # iterative index scans (filtered KNN that still fills `limit`)
_LOCK_MIGRATE = "hybridkb.migrate"
log = logging.getLogger(__name__)


def redact(url: str) -> str:
    """The URL (or key=value conninfo) without its passwords, for messages and `stats()`."""
    return validation.redact_target(url)


# A migration that rewrites a table names it on a line `-- vacuum after: <table>`: a
# rewritten table has no page marked all-visible, so its index-only scans (the BM25
# index's counts) read the heap until a VACUUM, which no write may trigger for a long time.
_VACUUM_AFTER = re.compile(r"^-- vacuum after: ([a-z_0-9]+)$", re.MULTILINE)


def migrate(conn: Any, shown_url: str) -> str | None:
    """Apply pending migrations in one transaction, serialized by an advisory lock, and
    check that pgvector is recent enough. `shown_url` is the redacted URL for messages.

    A store of a newer schema is left as it is: the reason it must not be written is returned.
    """
    import psycopg
    from psycopg import errors as pg_errors

    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [_LOCK_MIGRATE])
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, "
                "applied_at double precision NOT NULL DEFAULT extract(epoch FROM now()))")
            done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
            newer = migrations.newer_schema(done, "postgres")
            rewritten: list[str] = []
            for name, script in [] if newer else migrations.load("postgres"):
                if name in done:
                    continue
                conn.execute(script)  # several statements, no parameters
                conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", [name])
                rewritten += _VACUUM_AFTER.findall(script)
        _vacuum(conn, rewritten)
        version = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    except (pg_errors.FeatureNotSupported, pg_errors.UndefinedFile,
            pg_errors.InsufficientPrivilege) as exc:
        raise BackendUnavailableError(
            f"PostgreSQL at {shown_url} cannot provide the pgvector extension "
            f"(install pgvector >= 0.8 on the server, or have an administrator run "
            f"CREATE EXTENSION vector): {exc}") from None
    except psycopg.Error as exc:
        raise StoreError(f"cannot prepare the PostgreSQL store at {shown_url}: {exc}") from exc
    found = tuple(int(p) for p in str(version[0] if version else "0").split(".")[:3] if p.isdigit())
    if found < MIN_PGVECTOR:
        raise BackendUnavailableError(
            f"PostgreSQL at {shown_url} has pgvector {version[0] if version else 'none'}; "
            f"hybridkb needs pgvector >= 0.8 (ALTER EXTENSION vector UPDATE)")
    return newer


def _vacuum(conn: Any, tables: list[str]) -> None:
    """VACUUM (ANALYZE) the tables migrations rewrote that exist (outside their transaction);
    a role that may not is told why its searches may be slower, not stopped."""
    import psycopg
    from psycopg import sql

    for table in dict.fromkeys(tables):
        if conn.execute("SELECT to_regclass(%s)", [table]).fetchone()[0] is None:
            continue  # made later (the vector table, once a dimension is known)
        try:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
        except psycopg.Error as exc:
            log.warning("VACUUM %s after a migration failed (%s); searches read more until "
                        "autovacuum runs", table, exc)
