"""What one search asks of the store around the engines (issue #15): a search that one
list answers reads its items in one query; a fused search reads the lists' heads, then
what the pool still lacks. Real SQLite files; the statements are counted by SQLite's
trace callback."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    store = hybridkb.open(str(tmp_path / "kb.db"), embedder=HashingEmbedder(32))
    # 80 distinct items that all match: deeper than the heads (20) and the pool (50)
    store.add_many([{"id": f"n{i:02d}", "text": f"kestrel note {i} " + "word " * (i % 7) + f"w{i}"}
                    for i in range(80)])
    yield store
    store.close()


@contextmanager
def item_reads(kb: KnowledgeBase) -> Iterator[list[str]]:
    seen: list[str] = []
    conn = kb.backend._conn  # type: ignore[attr-defined]
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def reads_of_items(statements: list[str]) -> list[str]:
    # by id, or by rowid (a search reads the items its retrievals named by rowid)
    return [s for s in statements if "FROM items WHERE id IN" in s or "FROM items WHERE rowid IN" in s]


@pytest.mark.parametrize("mode", ["fts", "vector"])
def test_one_list_reads_its_items_once(kb: KnowledgeBase, mode: str) -> None:
    kb.search("kestrel note", mode=mode)  # indexes caught up, ids mapped
    with item_reads(kb) as statements:
        result = kb.search("kestrel note", mode=mode)
    assert len(result.hits) == 10
    assert len(reads_of_items(statements)) == 1


def test_a_fused_search_reads_what_the_pool_lacks(kb: KnowledgeBase) -> None:
    kb.search("kestrel note")
    with item_reads(kb) as statements:
        result = kb.search("kestrel note")
    assert result.answered_by == "hybrid" and len(result.hits) == 10
    assert 1 <= len(reads_of_items(statements)) <= 2


def test_a_page_past_the_pool_is_the_same_either_way(kb: KnowledgeBase) -> None:
    # The fused head is cut at the pool; asking for more moves the cut with it.
    for mode in ("fts", "vector", "hybrid"):
        whole = kb.search("kestrel note", mode=mode, limit=80).ids
        assert len(whole) == 80
        assert kb.search("kestrel note", mode=mode, limit=10, offset=40).ids == whole[40:50]
        assert kb.search("kestrel note", mode=mode, limit=10).ids == whole[:10]


def test_a_hybrid_search_of_a_large_store_retrieves_both_lists_at_once(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past CONCURRENT_MIN items the vector search runs on a worker thread beside the text
    # search; the answer is the one the sequential search gives, hit for hit.
    import threading

    from hybridkb.storage.sqlite import backend as sqlite_backend

    backend = kb.backend
    assert not backend.retrieves_concurrently  # type: ignore[attr-defined]  # 80 items
    queries = ["kestrel note 3", "word w17", "note 42 word"]
    sequential = [kb.search(q).hits for q in queries]
    monkeypatch.setattr(sqlite_backend, "CONCURRENT_MIN", 50)
    assert backend.retrieves_concurrently  # type: ignore[attr-defined]
    threads: list[str] = []
    vector_search = backend.vector_search
    # While the vector search runs, the text list's head is read (and judged): the vector
    # search here waits until that read has happened.
    read_ahead = threading.Event()
    items_by_key = backend.items_by_key
    monkeypatch.setattr(backend, "items_by_key", lambda keys: read_ahead.set() or items_by_key(keys))
    waited: list[bool] = []

    def vector_search_after_read_ahead(*args: object) -> object:
        threads.append(threading.current_thread().name)
        waited.append(read_ahead.wait(5))
        return vector_search(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "vector_search", vector_search_after_read_ahead)
    concurrent = []
    for q in queries:
        read_ahead.clear()
        concurrent.append(kb.search(q).hits)
    assert len(threads) == len(queries) and threading.current_thread().name not in threads
    assert waited == [True] * len(queries)
    assert [[dataclasses.asdict(h) for h in hits] for hits in concurrent] == \
        [[dataclasses.asdict(h) for h in hits] for hits in sequential]


def test_a_rowid_deleted_during_a_search_never_reads_as_the_item_that_took_it(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lists name items by rowid until the pipeline reads them. An item deleted between the
    # retrieval and that read gives its rowid to the next item written (SQLite reuses the
    # largest): the search must drop the hit, not show the newcomer with the old score.
    backend = kb.backend
    last = backend._read("SELECT id, rowid FROM items ORDER BY rowid DESC LIMIT 1")[0]  # type: ignore[attr-defined]
    text_search = backend.text_search

    def then_replace(*args: object) -> object:
        found = text_search(*args)  # type: ignore[arg-type]
        kb.delete(last[0])
        kb.add("an unrelated intruder", id="intruder")
        return found

    assert last[0] in kb.search("kestrel note 79 w79", mode="fts", limit=80).ids
    monkeypatch.setattr(backend, "text_search", then_replace)
    ids = kb.search("kestrel note 79 w79", mode="fts", limit=80).ids
    assert backend._read("SELECT rowid FROM items WHERE id = 'intruder'")[0][0] == last[1]  # type: ignore[attr-defined]
    assert last[0] not in ids and "intruder" not in ids
    assert len(ids) == 79  # every other item still found
