"""The store keeps the vectors of the queries it is asked (storage/asked.py), and its vector
indexes measure their recall on them: IVFFlat's probes on PostgreSQL, the one-bit codes'
rescore depth on SQLite."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.model import Filters
from hybridkb.storage import asked
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_recall
from hybridkb.storage.postgres import ann
from hybridkb.storage.sqlite import driver as sqlite_driver

DIM = 32


class LookupEmbedder(HashingEmbedder):
    """Queries named "q<k>" embed as row k of a given matrix (the hashing model's id, so
    a store written with it opens with this one)."""

    def __init__(self, queries: np.ndarray) -> None:
        super().__init__(queries.shape[1])
        self.queries = queries

    def embed_query(self, text: str) -> np.ndarray:
        return self.queries[int(text[1:])]


def _unit(m: np.ndarray) -> np.ndarray:
    out: np.ndarray = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)
    return out


def _clustered(n: int, seed: int, centers: int = 40, spread: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    middle = np.random.default_rng(3).standard_normal((centers, DIM))
    return _unit(middle[rng.integers(0, centers, n)] + spread * rng.standard_normal((n, DIM)))


def _items(vectors: np.ndarray) -> list[dict[str, object]]:
    return [{"id": f"v{k}", "text": f"item {k}", "vector": v} for k, v in enumerate(vectors)]


def _kept(target: str) -> list[tuple[int, int, bytes]]:
    """(digest, dim, vector) of the kept rows, oldest first."""
    sql = "SELECT digest, dim, vector FROM query_vectors ORDER BY seq"
    if target.startswith("postgresql"):
        with psycopg.connect(target) as conn:
            return [(int(d), int(n), bytes(v)) for d, n, v in conn.execute(sql).fetchall()]
    with sqlite3.connect(target) as conn:
        return [(int(d), int(n), bytes(v)) for d, n, v in conn.execute(sql).fetchall()]


def _ask(kb: KnowledgeBase, names: Sequence[int]) -> None:
    for k in names:
        assert kb.search(f"q{k}", mode="vector", limit=3).hits


def test_searches_keep_the_last_distinct_query_vectors(target: str, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(asked, "KEEP", 20)
    monkeypatch.setattr(asked, "FLUSH", 4)
    queries = _unit(np.random.default_rng(5).standard_normal((30, DIM)))
    with hybridkb.open(target, embedder=LookupEmbedder(queries)) as kb:
        kb.add_many(_items(_clustered(50, seed=1)))
        _ask(kb, range(30))
        _ask(kb, [29, 28, 27])  # asked before: not kept twice
        assert kb.search("q7", mode="fts").answered_by in ("fts", "none")  # no vector: nothing kept
    kept = _kept(target)
    assert len(kept) == 20  # the last KEEP distinct ones
    want = [asked.row(q) for q in queries[10:]]
    assert [r[0] for r in kept] == [w[0] for w in want if w is not None]
    assert all(dim == DIM and np.allclose(np.frombuffer(v, "<f4"), queries[10 + i])
               for i, (_, dim, v) in enumerate(kept))


def test_sample_queries_off_keeps_none(target: str) -> None:
    queries = _unit(np.random.default_rng(6).standard_normal((40, DIM)))
    with hybridkb.open(target, embedder=LookupEmbedder(queries), sample_queries=False) as kb:
        kb.add_many(_items(_clustered(50, seed=1)))
        _ask(kb, range(40))
    assert _kept(target) == []


def test_a_busy_store_drops_the_sample_and_searches_do_not_wait(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asked, "FLUSH", 2)
    path = str(tmp_path / "kb.db")
    queries = _unit(np.random.default_rng(7).standard_normal((6, DIM)))
    with hybridkb.open(path, embedder=LookupEmbedder(queries)) as kb:
        kb.add_many(_items(_clustered(50, seed=1)))
        # Another writer holds the file (through the store's own SQLite library: two copies
        # of SQLite in one process do not see each other's locks).
        other = sqlite_driver.connect(path, timeout=0)
        other.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            _ask(kb, range(6))
            kb._asked.flush()
            assert time.monotonic() - started < 5  # the writer's lock was never waited for
            assert kb._asked.dropped == 6
        finally:
            other.execute("ROLLBACK")
            other.close()
        _ask(kb, [0])  # asked again: kept now that the file is free
    assert len(_kept(path)) == 1


def _recall(kb: KnowledgeBase, vectors: np.ndarray, queries: np.ndarray) -> float:
    area = SearchArea(corpora=None, filters=Filters(), now=time.time())
    found = 0
    for q in queries:
        bar = np.sort(vectors @ q)[-10]
        found += sum(1 for _, s in kb.backend.vector_search(q, area, 10) if s >= bar - 1e-5)
    return found / (10 * len(queries))


def test_postgres_measures_its_probes_on_the_asked_queries(pg_url: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asked, "FLUSH", 10**6)  # kept only by flush(), which measures nothing
    vectors = _clustered(3000, seed=1)
    # Queries between the clusters, farther from the items than pseudo-queries sit.
    queries = _clustered(140, seed=2, spread=1.6)
    with hybridkb.open(pg_url, embedder=LookupEmbedder(queries), vector_index_min_rows=1000) as kb:
        kb.add_many(_items(vectors), batch_size=3000)
        first = kb.optimize()
        assert first["measured_on_asked"] == 0 and not first["vector_index_built"]
        _ask(kb, range(asked.MIN_ASKED - 1))
        kb._asked.flush()
        assert kb.optimize()["measured_on_asked"] == 0  # too few asked: pseudo-queries still
        _ask(kb, range(asked.MIN_ASKED - 1, 70))
        kb._asked.flush()
        report = kb.optimize()
        assert report["measured_on_asked"] == 70 and not report["vector_index_built"]
        assert report["probe_recall"] >= ann.RECALL_TARGET
        with psycopg.connect(pg_url) as conn:
            newest = conn.execute("SELECT max(seq) FROM query_vectors").fetchone()
            through = conn.execute("SELECT value FROM meta WHERE key = %s",
                                   [ann.META_ASKED_THROUGH]).fetchone()
        assert newest is not None and through == (str(newest[0]),)
        # The queries not asked yet, from the same place: the probes measured hold them.
        assert _recall(kb, vectors, queries[70:]) >= 0.9
        assert kb.optimize()["measured_on_asked"] == 70  # nothing new asked: kept as it was


def test_sqlite_measures_its_codes_on_the_asked_queries(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asked, "FLUSH", 10**6)  # kept only by flush(), which measures nothing
    vectors = _clustered(3000, seed=1)
    queries = _clustered(140, seed=2, spread=1.6)
    path = str(tmp_path / "kb.db")
    with hybridkb.open(path, embedder=LookupEmbedder(queries), vector_ann="codes") as kb:
        kb.add_many(_items(vectors))
        first = kb.optimize()
        assert first["measured_on_asked"] == 0 and first["codes_rescore"] is not None
        _ask(kb, range(70))
        kb._asked.flush()
        report = kb.optimize()
        assert report["vector_base_built"] and report["measured_on_asked"] == 70
        assert report["codes_recall"] >= 0.95
        assert _recall(kb, vectors, queries[70:]) >= 0.9
        again = kb.optimize()
        assert not again["vector_base_built"] and again["measured_on_asked"] == 70


def test_a_sample_of_queries_must_clear_the_target_by_its_standard_error() -> None:
    spread = [1.0] * 24 + [0.4] * 1  # mean 0.976, but one query in 25 far below
    assert vector_recall.holds(spread, 0.95, sampled=False)
    assert not vector_recall.holds(spread, 0.95, sampled=True)  # 0.976 - 1.645 x 0.024 < 0.95
    steady = [1.0] * 50 + [0.9] * 50  # mean 0.95 exactly: a sample must do better
    assert vector_recall.holds(steady, 0.95, sampled=False)
    assert not vector_recall.holds(steady, 0.95, sampled=True)
    assert vector_recall.holds([1.0] * 80 + [0.9] * 20, 0.95, sampled=True)  # 0.98 - 0.0066
    assert vector_recall.holds([], 0.95, sampled=True)


def test_postgres_measures_its_probes_on_asked_queries_by_itself_once(pg_url: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No optimize(): the write that keeps the 50th asked query measures the probes on them."""
    monkeypatch.setattr(asked, "FLUSH", 10)
    vectors = _clustered(3000, seed=1)
    queries = _clustered(80, seed=2, spread=1.6)
    with hybridkb.open(pg_url, embedder=LookupEmbedder(queries), vector_index_min_rows=1000) as kb:
        kb.add_many(_items(vectors), batch_size=3000)
        _ask(kb, range(40))
        kb._asked.flush()  # as a store closing does: kept, not measured
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT count(*) FROM query_vectors").fetchone() == (40,)
        assert _meta_value(pg_url, ann.META_ASKED) == "0"
        _ask(kb, range(40, 60))  # two writes of 10 by the sampler's thread, in turn
        kb._asked.flush()
        assert _meta_value(pg_url, ann.META_ASKED) == "50"  # measured at the 50th, once
        assert float(_meta_value(pg_url, ann.META_RECALL) or 0) >= ann.RECALL_TARGET


def test_sqlite_builds_a_base_measured_on_asked_queries_by_itself_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asked, "FLUSH", 10)
    vectors = _clustered(3000, seed=1)
    queries = _clustered(80, seed=2, spread=1.6)
    with hybridkb.open(str(tmp_path / "kb.db"), embedder=LookupEmbedder(queries),
                       vector_ann="codes") as kb:
        kb.add_many(_items(vectors))
        first = kb.optimize()
        assert first["measured_on_asked"] == 0
        _ask(kb, range(60))
        kb._asked.flush()
        kb.backend._vectors.wait(60)  # the background build the 50th query started
        report = kb.optimize()  # 50 or 60: the build read what was kept when it started
        assert not report["vector_base_built"] and report["measured_on_asked"] >= asked.MIN_ASKED
        assert report["vector_seq"] == first["vector_seq"]  # rebuilt from the same items


def _meta_value(url: str, key: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = %s", [key]).fetchone()
    return row[0] if row else None
