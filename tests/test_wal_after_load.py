"""A large `add_many` on a SQLite file leaves no WAL behind it (maintenance.truncate_wal),
never waits for a reader to do so, and a small write leaves the WAL to SQLite."""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import pytest

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.storage.sqlite import driver, maintenance


def _items(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"id": f"i{i}", "text": f"item {i} about the kestrel and topic {i % 13} " * 4}
            for i in range(start, start + n)]


def _wal(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_a_bulk_load_cuts_the_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maintenance, "WAL_CUT_BYTES", 1 << 20)  # a load of test size counts
    path = tmp_path / "kb.db"
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:
        kb.add(text="one before", id="first")
        small = _wal(path)
        assert 0 < small < maintenance.WAL_CUT_BYTES  # a small write: no checkpoint of ours
        kb.add_many(_items(3000), batch_size=500)
        assert _wal(path) == 0
        assert kb.count() == 3001 and kb.search("kestrel topic 7", mode="fts").hits
        kb.add(text="one after", id="last")  # the store goes on as before
        assert kb.get("last").text == "one after"


def test_a_reader_keeps_the_wal_and_the_load_does_not_wait(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kb.db"
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:
        kb.add_many(_items(200))
        monkeypatch.setattr(maintenance, "WAL_CUT_BYTES", 0)  # any WAL is cut
        with closing(driver.connect(str(path), timeout=5)) as reader:
            reader.execute("BEGIN")
            assert reader.execute("SELECT count(*) FROM items").fetchone()[0] == 200
            started = time.monotonic()
            kb.add_many(_items(200, start=200))
            assert time.monotonic() - started < 5  # not the 30 s busy timeout
            assert _wal(path) > 0  # the reader's snapshot needs it
            assert reader.execute("SELECT count(*) FROM items").fetchone()[0] == 200
            reader.execute("COMMIT")
        kb.add(text="after the reader", id="x")
        assert _wal(path) == 0
        assert kb.count() == 401


def _checkpoint_pages(kb: hybridkb.KnowledgeBase) -> int:
    return int(kb.backend._read("PRAGMA wal_autocheckpoint")[0][0])  # type: ignore[attr-defined]


def test_a_bulk_load_checkpoints_less_often_and_restores_the_interval(tmp_path: Path) -> None:
    """While add_many writes, SQLite's automatic checkpoint waits for BULK_CHECKPOINT_PAGES
    (a load's random id-index pages are copied once for many commits, not once for four);
    after it, failing or not, the default interval is back for ordinary writes."""
    seen: list[int] = []
    with hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(16)) as kb:
        assert _checkpoint_pages(kb) == maintenance.CHECKPOINT_PAGES
        kb.add_many(_items(600), batch_size=200, progress=lambda n: seen.append(_checkpoint_pages(kb)))
        assert seen == [maintenance.BULK_CHECKPOINT_PAGES] * 3
        assert _checkpoint_pages(kb) == maintenance.CHECKPOINT_PAGES
        with pytest.raises(hybridkb.InvalidInputError):
            kb.add_many([*_items(300, start=600), {"id": "bad", "text": 5}], batch_size=100)
        assert _checkpoint_pages(kb) == maintenance.CHECKPOINT_PAGES
        assert kb.count() == 900  # the batches before the bad item are in
