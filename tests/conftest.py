"""Shared fixtures: real stores on real files and on a real PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

BACKENDS = ["sqlite", "postgres"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="run the heavier randomized tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="needs --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


class PgDatabases(Protocol):
    def create_database(self, name: str, template: str | None = None) -> str: ...
    def drop_database(self, name: str) -> None: ...


class ExternalServer:
    """$HYBRIDKB_TEST_PG_DSN: a server we may create (and drop) databases on."""

    def __init__(self, dsn: str) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        if dsn.startswith(("postgresql://", "postgres://")):
            self._url = dsn
        else:  # key=value form: hybridkb.open() takes URLs
            p = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
            auth = quote(p.get("user", ""), safe="")
            if "password" in p:
                auth += ":" + quote(p["password"], safe="")
            self._url = f"postgresql://{auth}@{p.get('host', '')}:{p.get('port', '5432')}/" \
                        f"{quote(p.get('dbname', 'postgres'), safe='')}"
        self._admin = psycopg.connect(dsn, autocommit=True)

    def create_database(self, name: str, template: str | None = None) -> str:
        clone = f' TEMPLATE "{template}"' if template else ""
        self._admin.execute(f'CREATE DATABASE "{name}"{clone}')
        return urlunsplit(urlsplit(self._url)._replace(path="/" + name))

    def drop_database(self, name: str) -> None:
        self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        self._admin.close()


MIGRATED_DB = f"hkb_migrated_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgDatabases]:
    """One PostgreSQL + pgvector per session; failing to start it fails the tests.

    It also holds a database already migrated to the current schema: per-test databases
    are cloned from it, which saves each test the migration (tests of migrations and of
    racing openers start from `pg_empty_url`).
    """
    from pgserver import PgServer, external_dsn

    dsn = external_dsn()
    server: PgServer | ExternalServer = ExternalServer(dsn) if dsn else PgServer()
    if isinstance(server, PgServer):
        server.start()
    try:
        hybridkb.open(server.create_database(MIGRATED_DB), embedder=None).close()
        yield server
    finally:
        server.drop_database(MIGRATED_DB)
        server.stop()


def _database(server: PgDatabases, template: str | None) -> Iterator[str]:
    name = f"hkb_test_{uuid.uuid4().hex[:12]}"
    url = server.create_database(name, template)
    yield url
    server.drop_database(name)


@pytest.fixture
def pg_url(pg_server: PgDatabases) -> Iterator[str]:
    """The URL of an empty store in a database of its own, dropped after the test."""
    yield from _database(pg_server, MIGRATED_DB)


@pytest.fixture
def pg_empty_url(pg_server: PgDatabases) -> Iterator[str]:
    """The URL of a database with no hybridkb schema yet (pgvector may be installed)."""
    yield from _database(pg_server, None)


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store location for each backend."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "kb.db")


@pytest.fixture
def kb(target: str) -> Iterator[KnowledgeBase]:
    """A store with the small deterministic embedder (fast, offline)."""
    store = hybridkb.open(target, embedder=HashingEmbedder(64))
    yield store
    store.close()


@pytest.fixture
def fts_kb(target: str) -> Iterator[KnowledgeBase]:
    store = hybridkb.open(target, embedder=None)
    yield store
    store.close()


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The CLI reads hybridkb.toml from the user config folder: tests never see a developer's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "xdg-config"))
    for name in ("HYBRIDKB_CONFIG", "HYBRIDKB_DB", "HYBRIDKB_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
