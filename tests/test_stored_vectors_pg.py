"""Both dialects keep each item vector as the same values (codec.stored: int8 codes and a
scale per row): PostgreSQL's float32 column holds exactly what SQLite's blob decodes to,
and its migration 018 rounds a store's older float16 values as the codec does, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psycopg
from named import named

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.model import Filters, now_ts
from hybridkb.storage import codec
from hybridkb.storage.contract import SearchArea

DIM = 64


def _items(n: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(11)
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    rows[3] = 0.0
    rows[3, 5] = -2.0  # one large component: codes 0 but one
    return [{"id": f"v{k}", "text": f"item {k} about topic {k % 5}", "vector": r}
            for k, r in enumerate(rows)]


def _pg_vectors(url: str) -> dict[str, np.ndarray]:
    from pgvector.psycopg import register_vector

    with psycopg.connect(url) as conn:
        register_vector(conn)
        rows = conn.execute("SELECT i.id, v.embedding FROM item_vectors v "
                            "JOIN items i ON i.rowid = v.rowid").fetchall()
    return {str(i): codec.from_pg(v) for i, v in rows}


def test_both_dialects_store_the_same_values(pg_url: str, tmp_path: Path) -> None:
    items = _items(60)
    with hybridkb.open(pg_url, embedder=HashingEmbedder(DIM)) as pg, \
            hybridkb.open(str(tmp_path / "kb.db"), embedder=HashingEmbedder(DIM)) as lite:
        pg.add_many(items)
        lite.add_many(items)
        ids = [str(i["id"]) for i in items]
        on_pg, on_lite = pg.backend.vectors_for(ids), lite.backend.vectors_for(ids)
        assert all(on_pg[i].tobytes() == on_lite[i].tobytes() for i in ids)
        query = codec.normalized(items[7]["vector"], DIM, label="q")
        area = SearchArea(None, Filters(), now_ts())
        on_both = [named(kb.backend, kb.backend.vector_search(query, area, 20)) for kb in (pg, lite)]
        assert [i for i, _ in on_both[0]] == [i for i, _ in on_both[1]]
        assert np.allclose([s for _, s in on_both[0]], [s for _, s in on_both[1]], atol=1e-6)


def test_migration_018_rounds_older_values_as_the_codec_does(pg_url: str) -> None:
    items = _items(60)
    with hybridkb.open(pg_url, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
    new = _pg_vectors(pg_url)
    half = {i: v.astype(np.float16).astype(np.float32) for i, v in new.items()}  # as 011-017 kept them
    with psycopg.connect(pg_url) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        conn.execute("CREATE TABLE item_vectors_pending (id text PRIMARY KEY, "
                     f"embedding vector({DIM}) NOT NULL, content_hash text NOT NULL)")
        for i, v in half.items():
            conn.execute("UPDATE item_vectors SET embedding = %s FROM items "
                         "WHERE items.rowid = item_vectors.rowid AND items.id = %s", (v, i))
        conn.execute("INSERT INTO item_vectors_pending VALUES ('v1', %s, 'h')", (half["v1"],))
        conn.execute("DELETE FROM schema_migrations WHERE name = '018_int8_vectors'")
    assert all(np.array_equal(_pg_vectors(pg_url)[i], half[i]) for i in half)
    with hybridkb.open(pg_url, embedder=HashingEmbedder(DIM)) as kb:
        assert kb.backend.newer_schema is None
    migrated = _pg_vectors(pg_url)
    for i, v in half.items():  # bit for bit what the codec makes of the float16 values
        assert migrated[i].tobytes() == codec.stored(v).tobytes(), i
    with psycopg.connect(pg_url) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        (pending,) = conn.execute("SELECT embedding FROM item_vectors_pending").fetchone()
    assert codec.from_pg(pending).tobytes() == codec.stored(half["v1"]).tobytes()
