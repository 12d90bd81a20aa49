"""SQLite keeps vectors in a plain table of blobs by rowid (migration 009), float16 from
migration 011, int8 codes and a scale per row since 013; stores made before (a sqlite-vec
`vec0` table, float32 blobs, float16 blobs) are moved over when opened."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.storage import codec
from hybridkb.storage.sqlite import driver, tables

DIM = 16


def _items(n: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(7)
    return [{"id": f"i{i}", "text": f"item {i} about topic {i % 7}",
             "vector": rng.standard_normal(DIM).astype(np.float32)} for i in range(n)]


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(driver.connect(str(path), timeout=5)) as conn:
        return list(conn.execute(sql))


def _vectors(path: Path) -> dict[int, bytes]:
    return dict(_rows(path, "SELECT rowid, embedding FROM vec_items ORDER BY rowid"))


def _table_sql(path: Path) -> str:
    return str(_rows(path, "SELECT sql FROM sqlite_master WHERE name = 'vec_items'")[0][0])


def test_vectors_are_stored_as_given_and_a_wrong_length_is_refused(tmp_path: Path) -> None:
    path, items = tmp_path / "kb.db", _items(20)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
    assert not _table_sql(path).upper().startswith("CREATE VIRTUAL")
    stored = _vectors(path)
    assert len(stored) == 20
    for blob, item in zip(stored.values(), items, strict=True):
        vec = np.asarray(item["vector"], dtype=np.float32)
        assert len(blob) == 4 + DIM
        unit = (vec / np.linalg.norm(vec)).astype(np.float32)
        codes = np.rint(unit / (np.abs(unit).max() / np.float32(127)))
        assert np.frombuffer(blob[4:], dtype=np.int8).tolist() == codes.tolist()
        scale = np.float32(1 / np.sqrt(np.sum(codes.astype(np.float64) ** 2)))  # unit rows
        assert np.frombuffer(blob[:4], dtype="<f4").tolist() == [scale]
    with closing(driver.connect(str(path), timeout=5)) as conn, \
            pytest.raises(driver.integrity_error(), match="CHECK"):
        conn.execute("INSERT INTO vec_items (rowid, embedding) VALUES (999, ?)", (b"\0" * 2 * DIM,))


def _f32(blobs: dict[int, bytes]) -> list[tuple[int, bytes]]:
    return [(r, codec.from_stored_blob(b).astype("<f4").tobytes()) for r, b in blobs.items()]


def _half(blobs: dict[int, bytes]) -> list[tuple[int, bytes]]:
    return [(r, codec.from_stored_blob(b).astype("<f2").tobytes()) for r, b in blobs.items()]


def _through_half(blobs: dict[int, bytes]) -> dict[int, bytes]:
    """What migrations 011 and 013 make of the float32 blobs of these stored vectors."""
    return {r: codec.stored_from_half_blob(codec.half_from_f32_blob(b)) for r, b in _f32(blobs)}


def _rewrite(path: Path, rows: list[tuple[int, bytes]], width: int, undone: tuple[str, ...]) -> None:
    """Rewrite a store's vector table as an older hybridkb made it (`width` bytes a
    component), its later migrations not yet applied."""
    with closing(driver.connect(str(path), timeout=5)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TABLE vec_items")
        conn.execute("CREATE TABLE vec_items (rowid INTEGER PRIMARY KEY, "
                     f"embedding BLOB NOT NULL CHECK (length(embedding) = {width * DIM}))")
        conn.executemany("INSERT INTO vec_items (rowid, embedding) VALUES (?, ?)", rows)
        conn.execute(f"DELETE FROM schema_migrations WHERE name IN ({','.join('?' * len(undone))})",
                     undone)
        conn.execute("COMMIT")


def _to_f32(path: Path) -> None:
    """Rewrite a store as hybridkb made it before migration 011: float32 blobs."""
    _rewrite(path, _f32(_vectors(path)), 4, ("011_half_vectors", "013_int8_vectors"))


def _to_vec0(path: Path) -> None:
    """Rewrite a store as hybridkb made it before migration 009: float32 vectors in vec0."""
    rows = _f32(_vectors(path))
    with closing(driver.connect(str(path), timeout=5)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"CREATE VIRTUAL TABLE old_vectors USING vec0 (embedding float[{DIM}] "
                     "distance_metric=cosine)")
        conn.executemany("INSERT INTO old_vectors (rowid, embedding) VALUES (?, ?)", rows)
        conn.execute("DROP TABLE vec_items")
        conn.execute(f"CREATE VIRTUAL TABLE vec_items USING vec0 (embedding float[{DIM}] "
                     "distance_metric=cosine)")
        conn.execute("INSERT INTO vec_items (rowid, embedding) SELECT rowid, embedding FROM old_vectors")
        conn.execute("DROP TABLE old_vectors")
        conn.execute("DELETE FROM schema_migrations WHERE name IN "
                     "('009_plain_vectors', '011_half_vectors', '013_int8_vectors')")
        conn.execute("COMMIT")


def test_a_store_with_a_vec0_table_is_moved_to_the_plain_table(tmp_path: Path) -> None:
    path, items = tmp_path / "kb.db", _items(40)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
        before = [h.id for h in kb.search("item 3 topic", mode="vector", limit=5).hits]
    assert len(before) == 5
    vectors = _vectors(path)
    _to_vec0(path)
    assert _table_sql(path).upper().startswith("CREATE VIRTUAL")
    assert _vectors(path) == dict(_f32(vectors))

    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        assert kb.backend.newer_schema is None
        assert kb.check()["ok"]
        assert [h.id for h in kb.search("item 3 topic", mode="vector", limit=5).hits] == before
        kb.add("written after the move", id="new", vector=np.ones(DIM, dtype=np.float32))
        assert kb.get("new") is not None
    assert not _table_sql(path).upper().startswith("CREATE VIRTUAL")
    moved = _vectors(path)
    assert {k: moved[k] for k in vectors} == _through_half(vectors) and len(moved) == len(vectors) + 1


def test_a_store_of_float32_vectors_is_moved_to_the_stored_layout(tmp_path: Path) -> None:
    path, items = tmp_path / "kb.db", _items(40)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
        before = [h.id for h in kb.search("item 3 topic", mode="vector", limit=5).hits]
    vectors = _vectors(path)
    _to_f32(path)
    assert f"= {4 * DIM}" in _table_sql(path) and len(next(iter(_vectors(path).values()))) == 4 * DIM
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        assert kb.check()["ok"]
        assert [h.id for h in kb.search("item 3 topic", mode="vector", limit=5).hits] == before
        kb.add("written after the move", id="new", vector=np.ones(DIM, dtype=np.float32))
        assert kb.backend.vectors_for(["new"])["new"].tolist() == pytest.approx([DIM ** -0.5] * DIM, abs=1e-3)
    assert f"= {DIM + 4}" in _table_sql(path)
    moved = _vectors(path)
    assert {k: moved[k] for k in vectors} == _through_half(vectors) and len(moved) == len(vectors) + 1


def test_a_store_of_float16_vectors_is_moved_to_int8_in_one_transaction(tmp_path: Path) -> None:
    """Migration 013 on a store as the version before wrote it (float16 blobs, a vector
    base built from them, a re-embedding's pending vectors): every vector becomes the
    stored layout of its float16 values, the base keeps answering, optimize() VACUUMs."""
    path, items = tmp_path / "kb.db", _items(40)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
        before = [(h.id, round(h.retrievers["vector"].score, 2))
                  for h in kb.search("item 3 topic", mode="vector", limit=5).hits]
    half = _half(_vectors(path))
    _rewrite(path, half, 2, ("013_int8_vectors",))
    with closing(driver.connect(str(path), timeout=5)) as conn:
        conn.execute(tables.CREATE_PENDING)
        conn.execute("INSERT INTO vec_items_pending VALUES ('i1', ?, 'h')", (half[0][1],))
    assert f"= {2 * DIM}" in _table_sql(path)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        assert kb.check()["ok"]
        after = [(h.id, round(h.retrievers["vector"].score, 2))
                 for h in kb.search("item 3 topic", mode="vector", limit=5).hits]
        assert after == before
        assert kb.optimize()["reclaimed_bytes"] >= 0
    assert f"= {DIM + 4}" in _table_sql(path)
    moved = _vectors(path)
    assert moved == {r: codec.stored_from_half_blob(b) for r, b in half}
    assert _rows(path, "SELECT embedding FROM vec_items_pending") == [(codec.stored_from_half_blob(half[0][1]),)]


def test_a_failed_int8_migration_leaves_the_float16_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, items = tmp_path / "kb.db", _items(10)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
    half = _half(_vectors(path))
    _rewrite(path, half, 2, ("013_int8_vectors",))

    def broken(blobs: list[bytes]) -> list[bytes]:
        raise RuntimeError("disk went away")

    monkeypatch.setattr(codec, "stored_from_half_blobs", broken)
    with pytest.raises(Exception, match="disk went away"):
        hybridkb.open(path, embedder=HashingEmbedder(DIM))
    assert _vectors(path) == dict(half) and f"= {2 * DIM}" in _table_sql(path)
    assert ("013_int8_vectors",) not in _rows(path, "SELECT name FROM schema_migrations")


def test_a_new_store_has_8k_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with hybridkb.open(new, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(_items(5))
    assert _rows(new, "PRAGMA page_size") == [(driver.PAGE_SIZE,)] and driver.PAGE_SIZE == 8192
    with closing(driver.driver().connect(str(old))) as conn:  # made at SQLite's default size
        conn.execute("CREATE TABLE t (x)")
    assert _rows(old, "PRAGMA page_size") == [(4096,)]
    with hybridkb.open(old, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(_items(5))
        assert kb.count() == 5 and kb.check()["ok"]
    assert _rows(old, "PRAGMA page_size") == [(4096,)]


def test_hashes_are_kept_as_bytes_and_a_store_of_hex_hashes_is_moved(tmp_path: Path) -> None:
    """Migration 014: content and embedded hashes from 32 hex digits to their 16 bytes, in
    one transaction, logging no change; the store then reads and writes as before."""
    path, items = tmp_path / "kb.db", _items(30)
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        kb.add_many(items)
        kb.add_many([{"id": "plain", "text": "no vector yet"}], embed="defer")
        before = [h.id for h in kb.search("item 3 topic", mode="vector", limit=5).hits]
    hashes = _rows(path, "SELECT id, content_hash, embedded_hash FROM items ORDER BY rowid")
    assert all(isinstance(c, bytes) and len(c) == 16 for _, c, _ in hashes)
    assert [e for i, _, e in hashes if i == "plain"] == [None]
    assert all(e == c for i, c, e in hashes if i != "plain")
    with closing(driver.connect(str(path), timeout=5)) as conn:  # as the version before wrote it
        conn.execute("BEGIN IMMEDIATE")
        trigger = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'items_log_vector'").fetchone()[0]
        conn.execute("DROP TRIGGER items_log_vector")  # as the old writes did: no log rows
        conn.executemany("UPDATE items SET content_hash = ?, embedded_hash = ? WHERE id = ?",
                         [(c.hex(), None if e is None else e.hex(), i) for i, c, e in hashes])
        conn.execute(trigger)
        conn.execute("DELETE FROM schema_migrations WHERE name = '014_binary_hashes'")
        conn.execute("COMMIT")
    assert isinstance(_rows(path, "SELECT content_hash FROM items LIMIT 1")[0][0], str)
    log = _rows(path, "SELECT max(seq) FROM changes")
    with hybridkb.open(path, embedder=HashingEmbedder(DIM)) as kb:
        assert _rows(path, "SELECT max(seq) FROM changes") == log  # nothing for the indexes to redo
        assert _rows(path, "SELECT id, content_hash, embedded_hash FROM items ORDER BY rowid") == hashes
        assert [h.id for h in kb.search("item 3 topic", mode="vector", limit=5).hits] == before
        assert kb.check()["ok"]
        kb.add_many([dict(items[0], text="item 0 rewritten")], replace=True)  # its new vector given
        kb.add_many([{"id": "i1", "text": items[1]["text"]}], replace=True, embed="defer")  # same text
        assert kb.embed_pending() == 1  # "plain" only: i1 kept its vector (same content hash)
        assert kb.backend.ids_missing_vectors(10) == []
    assert "014_binary_hashes" in {r[0] for r in _rows(path, "SELECT name FROM schema_migrations")}
