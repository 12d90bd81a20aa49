"""SQLite keeps each long item text compressed on its own (storage/textcodec.py, migration
012): every reader sees the text as given, the substring search looks inside packed rows,
and a store of plain texts made before is packed when opened, without re-indexing."""

from __future__ import annotations

import random
import string
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.errors import StoreError
from hybridkb.model import parse_filters
from hybridkb.storage import textcodec
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.sqlite import driver

LONG = ("The zebrafish heart regenerates after injury; cardiomyocytes dedifferentiate and "
        "proliferate. ") * 6
TEXTS = {
    "long": LONG,
    "unicode": "Éclair façade naïve — 東京の天気は晴れ, Ünïcödé 🙂 " * 8,
    "short": "a note",
    "edge": "x" * (textcodec.PLAIN_CHARS - 1),
    "incompressible": "".join(random.Random(3).choices(string.ascii_letters + string.digits + "+/",
                                                       k=80)),
    "lines": "first line\n\n  second line\ttabbed\r\nthird " * 10,
}


def _rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(driver.connect(str(path), timeout=5)) as conn:
        return list(conn.execute(sql, params))


@pytest.mark.parametrize("text", [*TEXTS.values(), "", " ", "ab" * 100])
def test_pack_round_trips(text: str) -> None:
    packed = textcodec.pack(text)
    assert textcodec.unpack(packed) == text
    assert isinstance(packed, str) == (len(text) < textcodec.PLAIN_CHARS or packed == text)


def test_a_batch_packs_and_unpacks_as_each_text_alone() -> None:
    texts = [*TEXTS.values(), "", LONG, "ab" * 100]
    packed = textcodec.pack_many(texts)
    assert packed == [textcodec.pack(t) for t in texts]
    assert textcodec.unpack_many(packed) == texts
    rows = [(i, "title", value) for i, value in enumerate(packed)]
    assert textcodec.unpacked_rows(rows, 2) == [(i, "title", t) for i, t in enumerate(texts)]
    assert textcodec.pack_many([]) == [] and textcodec.unpack_many([]) == []
    with pytest.raises(StoreError, match="damaged"):  # a bad frame among good ones is named
        textcodec.unpack_many([packed[0], b"\x28\xb5\x2f\xfd broken", packed[0]])


def test_a_text_that_would_not_shrink_stays_plain() -> None:
    assert textcodec.pack(TEXTS["incompressible"]) == TEXTS["incompressible"]
    assert isinstance(textcodec.pack(LONG), bytes)


def test_long_texts_are_stored_packed_and_read_back_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    with hybridkb.open(path, embedder=None) as kb:
        kb.add_many([{"id": k, "text": v, "title": f"title {k}"} for k, v in TEXTS.items()])
        kb.add(LONG + " appended later", id="single")
        stored = dict(_rows(path, "SELECT id, typeof(text) FROM items"))
        assert stored["long"] == stored["unicode"] == stored["lines"] == stored["single"] == "blob"
        assert stored["short"] == stored["edge"] == stored["incompressible"] == "text"
        assert sum(r[0] for r in _rows(path, "SELECT length(text) FROM items WHERE id = 'long'")) \
            < len(LONG.encode()) / 2
        for key, text in TEXTS.items():  # get, search hits, export
            assert kb.get(key).text == text  # type: ignore[union-attr]
        hit = kb.search("zebrafish cardiomyocytes", mode="fts").hits[0]
        assert hit.id in ("long", "single") and "zebrafish" in hit.text
        exported = {i.id: i.text for batch in kb.backend.iter_items() for i in batch}
        assert exported == {**TEXTS, "single": LONG + " appended later"}
        # replacing a packed row hands the text index the new text (upsert's RETURNING)
        kb.upsert_many([{"id": "long", "text": LONG.replace("zebrafish", "axolotl")}])
        assert kb.search("axolotl", mode="fts").ids == ["long"]
    with hybridkb.open(path, embedder=None) as kb:  # the text index rebuilt from packed rows
        kb.backend.rebuild_indexes()
        assert kb.search("axolotl", mode="fts").ids == ["long"]
        assert set(kb.search("東京", mode="fts").ids) == {"unicode"}
        assert kb.check()["ok"]


def test_substring_search_looks_inside_packed_texts(tmp_path: Path) -> None:
    with hybridkb.open(tmp_path / "kb.db", embedder=None) as kb:
        kb.add_many([{"id": k, "text": v} for k, v in TEXTS.items()])
        kb.add_many([{"id": "titled", "text": "plain body", "title": "Cardiomyocytes Atlas"}])
        area = SearchArea(corpora=None, filters=parse_filters({}), now=time.time())

        def found(*words: str) -> dict[str, float]:
            hits = kb.backend.substring_search(list(words), area, 50)
            ids = dict(kb.backend._read("SELECT rowid, id FROM items", ()))
            return {ids[k]: s for k, s in hits}

        assert found("regenerat") == {"long": 1.0}  # part of a word, inside a packed row
        assert found("cardiomyocyte") == {"long": 1.0, "titled": 1.0}  # text and title alike
        assert found("éclair", "naïve") == {"unicode": 2.0}  # lowercased beyond ASCII
        assert found("tabbed", "note") == {"lines": 1.0, "short": 1.0}
        assert found("nowhere") == {}
        result = kb.search("regenerates", mode="hybrid")  # the pipeline's last resort
        assert result.ids == ["long"]
        assert kb.search("zzebrafish", mode="hybrid").answered_by in ("substring", "none")
        fallback = kb.search("ebrafis", mode="hybrid")
        assert fallback.answered_by == "substring" and fallback.ids == ["long"]


def test_a_damaged_packed_text_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    with hybridkb.open(path, embedder=None) as kb:
        kb.add(LONG, id="a")
    with closing(driver.connect(str(path), timeout=5)) as conn:
        conn.execute("UPDATE items SET text = ? WHERE id = 'a'", (b"\x28\xb5\x2f\xfd broken",))
    with hybridkb.open(path, embedder=None) as kb, pytest.raises(StoreError, match="damaged"):
        kb.get("a")


def _as_before_012(path: Path) -> None:
    """Rewrite a store as hybridkb made it before migration 012: every text plain."""
    with closing(driver.connect(str(path), timeout=5)) as conn:
        conn.execute("BEGIN")
        conn.execute("DROP TRIGGER items_log_update")  # leave the change log as it was
        for rowid, value in list(conn.execute("SELECT rowid, text FROM items")):
            conn.execute("UPDATE items SET text = ? WHERE rowid = ?", (textcodec.unpack(value), rowid))
        conn.execute("DELETE FROM schema_migrations WHERE name = '012_packed_text'")
        conn.execute("COMMIT")
    with closing(driver.connect(str(path), timeout=5)) as conn:  # the trigger, as 004 made it
        sql = next(s for n, s in driver.migrations.load("sqlite") if n == "004_change_log")
        trigger = next(s for s in driver.split_sql(sql) if "items_log_update" in s and "CREATE" in s)
        conn.execute(trigger)


def test_a_store_of_plain_texts_is_packed_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    items = [{"id": f"i{i}", "text": f"{LONG} number {i}"} for i in range(30)]
    items += [{"id": k, "text": v} for k, v in TEXTS.items()]
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:
        kb.add_many(items)
        kb.optimize()
    _as_before_012(path)
    assert {r[0] for r in _rows(path, "SELECT typeof(text) FROM items")} == {"text"}
    log_before = _rows(path, "SELECT max(seq), count(*) FROM changes")
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:
        kinds = dict(_rows(path, "SELECT id, typeof(text) FROM items"))
        assert [k for k, t in kinds.items() if t == "blob"] == [
            *(f"i{i}" for i in range(30)), "long", "unicode", "lines"]
        assert _rows(path, "SELECT max(seq), count(*) FROM changes") == log_before  # no re-index
        assert {i.id: i.text for i in kb.get_many([str(it["id"]) for it in items])} == \
            {it["id"]: it["text"] for it in items}
        assert kb.search("number 7 zebrafish", mode="fts").ids[0] == "i7"
        assert kb.check()["ok"]
        kb.add(LONG + " after the migration", id="later")  # the log's trigger is back
        assert _rows(path, "SELECT max(seq) FROM changes")[0][0] > log_before[0][0]
        kb.upsert_many([{"id": "i3", "text": "rewritten cormorant"}])
        assert kb.search("cormorant", mode="fts").ids == ["i3"]
    assert {r[0] for r in _rows(path, "SELECT name FROM schema_migrations")} >= {"012_packed_text"}


def test_a_failed_write_leaves_no_packed_row(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    with hybridkb.open(path, embedder=None) as kb:
        kb.add(LONG, id="a")
        with pytest.raises(hybridkb.InvalidInputError):
            kb.add_many([{"id": "b", "text": LONG}, {"id": "c", "text": "bad \ud800 surrogate" * 10}])
        assert kb.get_many(["b"]) == [] and kb.count() == 1
        assert kb.get("a").text == LONG  # type: ignore[union-attr]


def test_optimize_returns_the_pages_the_migration_freed(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    items = [{"id": f"i{i}", "text": f"{LONG} number {i}"} for i in range(1500)]
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:
        kb.add_many(items)
        assert kb.optimize()["reclaimed_bytes"] == 0  # nothing free: no VACUUM
    _as_before_012(path)
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:  # packs the texts
        before = path.stat().st_size
        assert _rows(path, "SELECT value FROM meta WHERE key = 'vacuum_due'") == [("1",)]
        report = kb.optimize()
        assert report["reclaimed_bytes"] > before / 2
        assert _rows(path, "SELECT value FROM meta WHERE key = 'vacuum_due'") == []
        assert kb.optimize()["reclaimed_bytes"] == 0  # once
        with closing(driver.connect(str(path), timeout=5)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert path.stat().st_size < before / 2
        assert [i.text for i in kb.get_many(["i0", "i1499"])] == [items[0]["text"], items[-1]["text"]]
        assert kb.search("number 1499 zebrafish", mode="fts").ids[0] == "i1499"
        assert kb.search("number 12 zebrafish", mode="vector").hits
        kb.add(LONG + " after the vacuum", id="later")
        assert kb.get("later").text == LONG + " after the vacuum"
        assert kb.check()["ok"]
