"""Shared fixtures: real stores on real files (and, once wired, a real PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

BACKENDS = ["sqlite"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="run the heavier randomized tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="needs --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store location for each backend."""
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
