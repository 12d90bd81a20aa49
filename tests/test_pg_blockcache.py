"""The BM25 blocks a store keeps across searches (blockcache.py) never outlive the rows:
other connections' inserts, deletes, text changes, merges and table rewrites show in the
next search, which answers as scoring every match does."""

from __future__ import annotations

import random
import time

import numpy as np
import psycopg
import pytest

import hybridkb
from hybridkb.model import Filters
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import blockcache
from hybridkb.textquery import parse

WORDS = [f"w{i}" for i in range(200)]


def _items(seed: int, n: int, prefix: str) -> list[dict[str, object]]:
    rng = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(WORDS[min(int(rng.paretovariate(0.8)) - 1, len(WORDS) - 1)] for _ in range(k))

    return [{"id": f"{prefix}{i:05d}", "corpus": "c", "text": text(rng.randint(3, 60)),
             "title": text(2) if rng.random() < 0.5 else None} for i in range(n)]


QUERIES = ["w0 w1", "w2 w5 w9", "w0 w3 w17 w40", "w1", "w7 w8 w11 w60", '"w0 w1" w4']


def _compare(reader: hybridkb.KnowledgeBase, exact: hybridkb.KnowledgeBase) -> None:
    area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
    for text in QUERIES:
        want = exact.backend.text_search(parse(text), area, 50)
        got = reader.backend.text_search(parse(text), area, 50)
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9), text
        tied = want[-1][1] if want else 0.0
        for doc in dict(got).keys() ^ dict(want).keys():  # only ties at the cut may swap
            assert dict(got).get(doc, dict(want).get(doc)) == pytest.approx(tied, rel=1e-9), text


@pytest.mark.parametrize("parts", [1, 4])
def test_cached_blocks_follow_other_connections_writes(pg_url: str, parts: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb.storage.postgres import fulltext

    if parts > 1:  # several pipelined statements, each naming its own blocks
        monkeypatch.setattr(fulltext, "PART_MIN", 1)
    reader = hybridkb.open(pg_url, embedder=None)
    writer = hybridkb.open(pg_url, embedder=None)
    exact = hybridkb.open(pg_url, embedder=None, bm25_search="exact")
    try:
        writer.add_many(_items(1, 800, "a"), batch_size=800)  # one transaction: one xmin
        _compare(reader, exact)
        cache: blockcache.BlockCache = reader.backend._blocks  # type: ignore[attr-defined]
        misses = cache.misses
        _compare(reader, exact)  # nothing changed: every block comes from the cache
        assert cache.misses == misses and cache.hits > 0

        writer.add_many(_items(2, 40, "b"), batch_size=40)  # new blocks of the same words
        _compare(reader, exact)
        assert writer.delete_many([f"a{i:05d}" for i in range(0, 800, 7)]) > 0  # blocks rewritten
        _compare(reader, exact)
        writer.upsert("w0 w0 w0 w1 w1 fresh", id="a00001", corpus="c", title="w0")  # a text change
        _compare(reader, exact)
        # VACUUM frees the old versions' ctids and the next write's blocks take them: the
        # same ctids with other xmins (keyed by ctid alone, this reads old postings).
        assert writer.delete_many([f"a{i:05d}" for i in range(1, 800, 5)]) > 0
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM bm25_blocks")
        writer.add_many(_items(6, 60, "c"), batch_size=60)
        _compare(reader, exact)
        writer.backend.optimize()  # type: ignore[attr-defined]  # merges: blocks replaced
        _compare(reader, exact)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE items SET corpus = 'gone' WHERE id IN ('a00002', 'a00003')")
            # Rewritten: survivors move to other ctids and keep their xmin, so an old
            # (ctid, xmin) can name another block now; the file (scope) tells them apart.
            conn.execute("VACUUM FULL bm25_blocks")
        _compare(reader, exact)
        with psycopg.connect(pg_url, autocommit=True) as conn:  # emptied and refilled
            conn.execute("TRUNCATE items, bm25_blocks, corpus_stats RESTART IDENTITY CASCADE")
        writer.add_many(_items(3, 300, "z"), batch_size=300)
        _compare(reader, exact)
    finally:
        reader.close()
        writer.close()
        exact.close()


def test_a_rewritten_table_is_read_whole_again(pg_url: str) -> None:
    """After VACUUM FULL a block may sit where another block of the same transaction was:
    the read sees its scope changed and asks for every block (counted as misses)."""
    reader = hybridkb.open(pg_url, embedder=None)
    writer = hybridkb.open(pg_url, embedder=None)
    try:
        writer.add_many(_items(4, 400, "a"), batch_size=400)
        area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
        query = parse("w0 w1 w2")
        before = reader.backend.text_search(query, area, 20)
        cache: blockcache.BlockCache = reader.backend._blocks  # type: ignore[attr-defined]
        scope = cache.scope
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM FULL bm25_blocks")
        misses = cache.misses
        assert reader.backend.text_search(query, area, 20) == before
        assert cache.scope != scope and cache.misses > misses
    finally:
        reader.close()
        writer.close()


def test_no_cache_answers_the_same(pg_url: str) -> None:
    cached = hybridkb.open(pg_url, embedder=None)
    plain = hybridkb.open(pg_url, embedder=None, bm25_cache_mb=0)
    try:
        cached.add_many(_items(5, 500, "a"), batch_size=250)
        area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
        for _ in range(2):
            for text in QUERIES:
                a = cached.backend.text_search(parse(text), area, 30)
                b = plain.backend.text_search(parse(text), area, 30)
                assert a == b, text
        assert plain.backend._blocks.nbytes == 0  # type: ignore[attr-defined]
    finally:
        cached.close()
        plain.close()


def test_cache_memory_is_bounded() -> None:
    cache = blockcache.BlockCache(1 << 20)
    block = blockcache.Block(np.arange(4096, dtype=np.int64), np.ones(4096, dtype=np.int16),
                             np.ones(4096, dtype=np.int16), np.ones(4096, dtype=np.int32))
    for i in range(100):  # 64 KiB each
        cache.put(("s", f"k{i}"), block, block.nbytes)
        assert cache.nbytes <= 1 << 20
    assert cache.get(("s", "k0")) is None  # the least recently used went first
    assert cache.get(("s", "k99")) is block
    cache.put(("s", "big"), block, 1 << 20)  # a value of most of the room is not kept
    assert cache.get(("s", "big")) is None


@pytest.mark.parametrize("rowids", [
    [3, 9, 12],  # one block's span: 4-byte offsets from the smallest
    [5_000_000_000, 5_000_000_007, 5_000_000_001],  # past 2^32, a narrow span
    [1, 3_000_000_000, 42],  # a span of 2^31 or more: 8-byte rowids
    [2**62, 7],
    [77],
])
def test_parse_reads_what_the_server_packs(pg_url: str, rowids: list[int]) -> None:
    """`packed` is written by the server (hybridkb_pack_postings, a generated column) and
    read by the client: both ends of one format, in the arrays' order."""
    hybridkb.open(pg_url, embedder=None).close()  # the schema, with the function
    rng = random.Random(len(rowids))
    nt = [rng.choice([0, 1, 32767]) for _ in rowids]
    nb = [rng.choice([0, 5, 300]) for _ in rowids]
    dl = [rng.choice([1, 40, 2**31 - 1]) for _ in rowids]
    with psycopg.connect(pg_url) as conn:
        packed = conn.cursor(binary=True).execute(
            "SELECT hybridkb_pack_postings(%s::bigint[], %s::smallint[], %s::smallint[], "
            "%s::integer[])", [rowids, nt, nb, dl]).fetchone()[0]  # type: ignore[index]
    block = blockcache.Block.parse(packed, len(rowids))
    assert block.ids.tolist() == rowids and block.nt.tolist() == nt
    assert block.nb.tolist() == nb and block.dl.tolist() == dl
    assert block.ids.dtype == np.int64


def test_a_store_of_the_old_format_is_carried_over(pg_url: str) -> None:
    """A store written before migration 015 (`packed` as array_send output, compressed)
    is rewritten by the next open, vacuumed, and answers as scoring every match, then
    after writes (`packed` a plain column since migration 016)."""
    kb = hybridkb.open(pg_url, embedder=None)
    kb.add_many(_items(7, 300, "a"), batch_size=100)
    kb.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the store as migration 014 left it
        conn.execute("""
            CREATE FUNCTION hybridkb_pack(rowids bigint[], nt smallint[], nb smallint[],
                                          dl integer[])
                RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE
                AS $$ SELECT array_send(rowids) || array_send(nt) || array_send(nb)
                          || array_send(dl) $$;
            ALTER TABLE bm25_blocks DROP COLUMN packed;
            ALTER TABLE bm25_blocks ADD COLUMN packed bytea
                GENERATED ALWAYS AS (hybridkb_pack(rowids, nt, nb, dl)) STORED;
            DROP TRIGGER bm25_blocks_pack ON bm25_blocks;
            DROP FUNCTION hybridkb_bm25_pack();
            DROP FUNCTION hybridkb_pack_postings(bigint[], smallint[], smallint[], integer[]);
            DELETE FROM schema_migrations WHERE name LIKE '015%' OR name LIKE '016%' OR name LIKE '017%';
        """)
        assert conn.execute("SELECT get_byte(packed, 0) FROM bm25_blocks LIMIT 1").fetchone() == (0,)
    reader = hybridkb.open(pg_url, embedder=None)
    exact = hybridkb.open(pg_url, embedder=None, bm25_search="exact")
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            widths = conn.execute("SELECT DISTINCT get_byte(packed, 0) FROM bm25_blocks "
                                  "WHERE packed IS NOT NULL").fetchall()
            vacuumed = conn.execute("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables "
                                    "WHERE relname = 'bm25_blocks'").fetchone()
        assert widths == [(4,)] and vacuumed == (True,)
        _compare(reader, exact)
        reader.add_many(_items(8, 150, "b"), batch_size=150)  # written after both migrations
        reader.delete_many([f"a{k:05d}" for k in range(0, 300, 5)])
        _compare(reader, exact)
    finally:
        reader.close()
        exact.close()
