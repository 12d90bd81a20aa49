"""PostgreSQL bulk writes: COPY (binary) for new items and vectors, HNSW rebuilt for big batches."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

import hybridkb
from hybridkb import InvalidInputError
from hybridkb.model import Filters
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import bulk


def _everywhere() -> SearchArea:
    return SearchArea(corpora=None, filters=Filters(), now=2e9)


def _items(start: int, n: int, dim: int = 16) -> list[dict[str, object]]:
    rng = np.random.default_rng(start)
    return [{"id": f"b{k}", "text": f"bulk item {k} river {k % 7}", "title": f"T{k}",
             "metadata": {"n": k, "tags": ["a", "b"], "x": None}, "kind": "note",
             "vector": rng.standard_normal(dim).astype(np.float32)} for k in range(start, start + n)]


def test_copy_writes_what_insert_writes(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    real = bulk.copy_items

    def spy(conn: psycopg.Connection, columns: list[list[object]]) -> object:  # type: ignore[type-arg]
        used.append(len(columns[0]))
        return real(conn, columns)

    monkeypatch.setattr(bulk, "copy_items", spy)
    items = _items(0, 250)
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many(items, batch_size=250)
        kb.add_many(_items(1000, 3), batch_size=10)  # small: INSERT
        assert used == [250]
        got = kb.get("b7")
        assert got is not None and got.metadata == {"n": 7, "tags": ["a", "b"], "x": None}
        assert (got.title, got.kind, got.text) == ("T7", "note", "bulk item 7 river 0")
        vec = kb.backend.vectors_for(["b7"])["b7"]
        want = np.asarray(items[7]["vector"], dtype=np.float32)
        assert np.allclose(vec, want / np.linalg.norm(want), atol=1e-6)
        assert kb.search("river 3", mode="fts", limit=3).ids[0] in {"b3", "b10", "b17"}
        assert kb.count() == 253 and kb.backend.integrity_problems() == []
        with pytest.raises(InvalidInputError):  # an existing id fails the whole COPY
            kb.add_many(_items(100, 200))
        assert kb.count() == 253


def test_a_batch_as_large_as_the_store_rebuilds_the_hnsw_index(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "HNSW_REBUILD_MIN", 100)
    index_oid = "SELECT 'item_vectors_hnsw'::regclass::oid"
    with hybridkb.open(pg_url, embedder=None, hnsw_min_rows=50) as kb, \
            psycopg.connect(pg_url, autocommit=True) as conn:
        kb.add_many(_items(0, 120))  # crosses hnsw_min_rows: the index is built
        first = conn.execute(index_oid).fetchone()
        kb.add_many(_items(200, 60))  # fewer than stored: into the live graph
        assert conn.execute(index_oid).fetchone() == first
        kb.add_many(_items(400, 300))  # more than stored: dropped and built again
        second = conn.execute(index_oid).fetchone()
        assert second is not None and second != first
        assert conn.execute("SELECT count(*) FROM item_vectors").fetchone() == (480,)
        assert kb.backend.integrity_problems() == []
        query = np.asarray(_items(400, 1)[0]["vector"], dtype=np.float32)
        hits = kb.backend.vector_search(query / np.linalg.norm(query), _everywhere(), 10)
        assert len(hits) == 10 and hits[0][0] == "b400"
