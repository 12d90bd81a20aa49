"""What a search keeps between searches (storage/sqlite/reads.py, the vector base's masks)
never outlives the store's state: a reused rowid, another connection's write, an item
expiring between two searches. Real SQLite files and real indexes beside them."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase, fusion
from hybridkb.model import Filters, now_ts
from hybridkb.storage.contract import SearchArea


def open_kb(path: Path) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(32))


def rowid_of(kb: KnowledgeBase, item_id: str) -> int:
    return int(kb.backend._read("SELECT rowid FROM items WHERE id = ?", (item_id,))[0][0])


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_a_reused_rowid_maps_to_its_new_item(tmp_path: Path, mode: str) -> None:
    kb = open_kb(tmp_path / "kb.db")
    kb.add_many([{"id": "first", "text": "zebra crossing notes"},
                 {"id": "last", "text": "zebra stripes notes"}])
    old = rowid_of(kb, "last")
    assert {h.id for h in kb.search("zebra", mode=mode).hits} == {"first", "last"}  # ids now kept
    kb.delete("last")
    kb.add("zebra stripes notes again", id="newcomer")  # SQLite reuses the largest rowid
    assert rowid_of(kb, "newcomer") == old
    assert {h.id for h in kb.search("zebra", mode=mode).hits} == {"first", "newcomer"}
    kb.close()


def test_another_connections_delete_and_reuse_is_seen(tmp_path: Path) -> None:
    reader, writer = open_kb(tmp_path / "kb.db"), open_kb(tmp_path / "kb.db")
    writer.add_many([{"id": f"n{i}", "text": f"walrus note {i}"} for i in range(5)])
    assert len(reader.search("walrus").hits) == 5
    writer.delete("n4")
    writer.add("walrus note reborn", id="reborn")
    writer.set_label_template("default", "[{title}]")
    result = reader.search("walrus")
    assert {h.id for h in result.hits} == {"n0", "n1", "n2", "n3", "reborn"}
    assert reader.label_templates() == {"default": "[{title}]"}  # meta read again too
    assert reader.corpora() == {"default": 5}
    reader.close()
    writer.close()


def test_the_vector_mask_follows_the_clock(tmp_path: Path) -> None:
    kb = open_kb(tmp_path / "kb.db")
    kb.add_many([{"id": "keeps", "text": "otter facts"},
                 {"id": "expires", "text": "otter facts too", "ttl": 3600.0}])
    backend = kb.backend
    query = kb.embedder.embed_query("otter facts")  # type: ignore[union-attr]
    now = now_ts()

    def ids(at: float) -> set[str]:
        area = SearchArea(corpora=("default",), filters=Filters(), now=at)
        keys = [k for k, _ in backend.vector_search(query, area, 10)]  # rowids
        return {item.id for item in backend.items_by_key(keys).values()}

    backend._vectors.build_now(backend.vector_dim())  # both rows in the base: masks apply
    assert ids(now) == {"keeps", "expires"}
    assert ids(now + 7200) == {"keeps"}  # past the expiry: the kept mask no longer holds
    assert ids(now) == {"keeps", "expires"}  # an earlier clock is asked afresh as well
    kb.close()


def test_fuse_with_best_is_fuse_and_best_possible() -> None:
    rng = random.Random(3)
    for _ in range(200):
        lists = [[(f"d{rng.randrange(40)}", rng.choice([rng.random() * 10, 1.0, float("nan")]))
                  for _ in range(rng.randrange(0, 30))] for _ in range(rng.randrange(1, 4))]
        weights = [rng.random() for _ in lists]
        for method in fusion.RANK_FUSIONS:  # calibrated needs the items, not the lists alone
            fused, best = fusion.fuse_with_best(method, lists, weights=weights)
            assert fused == fusion.fuse(method, lists, weights=weights)
            assert best == fusion.best_possible(method, lists, weights=weights)


def test_fuse_with_best_top_is_the_head_of_the_whole_fusion() -> None:
    # A search reads only the pool's worth of one fused list: the head it gets must be the
    # whole fusion's head, ties at the cut included (the scores below tie often).
    rng = random.Random(11)
    for _ in range(300):
        n_lists = rng.choice([1, 1, 2])
        lists = []
        for _ in range(n_lists):
            n = rng.randrange(0, 60)
            scores = sorted((rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(n)), reverse=True)
            ids = rng.sample([f"d{i}" for i in range(80)], n)
            lists.append(list(zip(ids, scores, strict=True)))
        if rng.random() < 0.1 and lists[0]:  # out of order: sorted whole
            lists[0] = lists[0][::-1]
        weights = [rng.choice([0.0, 0.4, 1.0]) for _ in lists]
        top = rng.randrange(1, 40)
        for method in ("convex", "dbsf"):
            whole, best = fusion.fuse_with_best(method, lists, weights=weights)
            head, head_best = fusion.fuse_with_best(method, lists, weights=weights, top=top)
            assert head_best == best
            assert head == whole[: len(head)]
            assert len(head) >= min(top, len(whole))
            if len(head) < len(whole):  # cut only where the scores step down
                assert whole[len(head)][1] < head[-1][1]


def test_another_processes_index_commit_is_seen_by_the_next_search(tmp_path: Path) -> None:
    # A search reads the text index's state file only when a stat of it differs: another
    # handle's commit (and its rebuild, a new generation) must still reach the next search.
    reader, writer = open_kb(tmp_path / "kb.db"), open_kb(tmp_path / "kb.db")
    writer.add_many([{"id": f"n{i}", "text": f"puffin note {i}"} for i in range(3)])
    writer.backend._text.current()
    assert len(reader.search("puffin", mode="fts").hits) == 3
    first = reader.backend._text._index
    assert first is not None
    writer.add("puffin colony", id="late")
    committed = writer.backend._text.current().seq
    assert first.seq < committed
    assert {h.id for h in reader.search("puffin", mode="fts").hits} == {"n0", "n1", "n2", "late"}
    assert reader.backend._text._index is first and first.seq == committed  # reloaded, not a delta
    rebuilt = writer.backend._text.rebuild_now()
    reader.search("puffin", mode="fts")
    now = reader.backend._text._index
    assert now is not None and now.generation == rebuilt.generation != first.generation
    reader.close()
    writer.close()


def test_the_state_file_is_read_again_when_replaced(tmp_path: Path) -> None:
    import json
    import os

    from hybridkb.storage.indexes.text import STATE_FILE, StateReader

    reader = StateReader(tmp_path)
    assert reader.read() is None
    for seq in range(1, 6):  # same size, written faster than the file clock may tick
        tmp = tmp_path / "next.tmp"
        tmp.write_text(json.dumps({"seq": seq}), encoding="utf-8")
        os.replace(tmp, tmp_path / STATE_FILE)
        assert reader.read() == {"seq": seq}
        assert reader.read() == {"seq": seq}


def test_items_read_by_a_stale_rowid_are_the_right_ones(tmp_path: Path) -> None:
    # get() reads the ids a search mapped by their rowids; another connection may have
    # deleted an item, reused its rowid, or rewritten one since: each row's id is checked.
    reader, writer = open_kb(tmp_path / "kb.db"), open_kb(tmp_path / "kb.db")
    writer.add_many([{"id": "a", "text": "gannet one"}, {"id": "b", "text": "gannet two"},
                     {"id": "c", "text": "gannet three", "ttl": 3600.0}])
    assert len(reader.search("gannet", mode="fts").hits) == 3  # rowids of a, b, c known
    old_b = rowid_of(writer, "b")
    writer.delete_many(["c", "b"])
    writer.add("gannet reborn", id="d")
    writer.upsert("gannet one, rewritten", id="a")
    assert rowid_of(writer, "d") == old_b
    got = reader.backend.get(["a", "b", "c", "d"], include_expired=True, now=now_ts())
    assert [(i.id, i.text) for i in got] == [("a", "gannet one, rewritten"), ("d", "gannet reborn")]
    assert [i.id for i in reader.backend.get(["b", "c"], include_expired=True, now=now_ts())] == []
    writer.add("gannet soon gone", id="e", ttl=3600.0)
    assert len(reader.search("gannet", mode="fts").hits) == 3  # a, d, e: rowids known
    later = now_ts() + 7200.0
    assert [i.id for i in reader.backend.get(["a", "e"], include_expired=False, now=later)] == ["a"]
    assert [i.id for i in reader.backend.get(["a", "e"], include_expired=True, now=later)] == ["a", "e"]
    reader.close()
    writer.close()


def test_reads_through_the_memory_map_see_another_connections_writes(tmp_path: Path) -> None:
    """With `mmap_mb` pages are read through a memory map; a write by another connection
    that grows the file past what was mapped is still read."""
    path = tmp_path / "kb.db"
    mapped = hybridkb.open(str(path), embedder=HashingEmbedder(32), mmap_mb=1024)
    plain = open_kb(path)
    assert mapped.backend._read("PRAGMA mmap_size")[0][0] > 0
    assert plain.backend._read("PRAGMA mmap_size")[0][0] == 0  # the default
    mapped.add("walrus colony census", id="seed")
    assert [h.id for h in mapped.search("walrus", mode="fts").hits] == ["seed"]
    writer = open_kb(path)
    writer.add_many([{"id": f"w{i}", "text": f"walrus tusk {i} " + "filler words " * 200}
                     for i in range(300)])  # a few hundred pages past what was mapped
    for kb in (mapped, plain):
        found = {h.id for h in kb.search("walrus tusk", mode="fts", limit=400).hits}
        assert found == {"seed"} | {f"w{i}" for i in range(300)}
        item = kb.get("w299")
        assert item is not None and item.text.startswith("walrus tusk 299")
    for kb in (mapped, plain, writer):
        kb.close()


_TRUNCATED = """
import os, sys
import hybridkb
from hybridkb import HashingEmbedder
path = sys.argv[1]
kb = hybridkb.open(path, embedder=HashingEmbedder(32))
kb.add_many([{"id": f"i{i}", "text": f"walrus {i} " + "filler " * 300} for i in range(1500)])
kb.backend._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
other = hybridkb.open(path, embedder=HashingEmbedder(32))
assert other.get("i1499") is not None
os.truncate(path, os.path.getsize(path) // 3)
try:
    other.get("i1499")
    other.search("walrus 1499", mode="fts")
except hybridkb.HybridKBError as exc:
    print("error:", type(exc).__name__)
else:
    print("no error")
"""


def test_a_store_file_truncated_under_an_open_handle_raises_not_crashes(tmp_path: Path) -> None:
    """By default pages are read with read(): a file cut short under an open handle is a
    StoreError. (Through a memory map, the default's alternative, the process dies of SIGBUS.)"""
    done = subprocess.run([sys.executable, "-c", _TRUNCATED, str(tmp_path / "kb.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "error: StoreError"
