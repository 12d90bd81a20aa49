"""The SQLite driver binds bytes, None and bool through cheap adapters (driver._bind_cheaply):
what lands in the store must be exactly what binding them without adapters stored."""

from __future__ import annotations

from contextlib import closing

import hybridkb
from hybridkb.storage.sqlite import driver


def test_bytes_none_and_bools_are_stored_as_without_adapters(tmp_path):
    module = driver.driver()
    for kind in (bytes, type(None), bool):
        assert (kind, module.PrepareProtocol) in module.adapters  # else 1-2 us a parameter
    with closing(driver.connect(str(tmp_path / "t.db"), timeout=5)) as conn:
        conn.execute("CREATE TABLE t (a, b, c, d, e)")
        conn.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?)", (b"\x00\xffblob", None, True, False, b""))
        row = conn.execute("SELECT a, typeof(a), typeof(b), c, typeof(c), d, e, typeof(e) FROM t").fetchone()
    assert tuple(row) == (b"\x00\xffblob", "blob", "null", 1, "integer", 0, b"", "blob")


def test_a_stored_item_reads_back_its_bytes_fields_and_flags(tmp_path):
    kb = hybridkb.open(tmp_path / "kb.db", embedder="hashing-64")
    try:
        kb.add_many([{"id": "a", "text": "alpha text", "stale": True, "kind": None},
                     {"id": "b", "text": "beta text", "title": None}])
        a, b = kb.get("a"), kb.get("b")
        assert (a.text, a.stale, a.kind) == ("alpha text", True, None)
        assert (b.text, b.stale, b.title) == ("beta text", False, None)
        assert [h.id for h in kb.search("beta", mode="fts").hits] == ["b"]  # "a" is stale: hidden
    finally:
        kb.close()
