"""PostgreSQL bulk writes: COPY (binary) for new items and vectors, the vector index rebuilt for big batches."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import psycopg
import pytest
from named import named

import hybridkb
from hybridkb import InvalidInputError
from hybridkb.model import Filters
from hybridkb.storage import codec
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

    def spy(conn: psycopg.Connection, columns_of: Callable[[int, int], list[list[object]]],  # type: ignore[type-arg]
            size: int) -> object:
        used.append(size)
        return real(conn, columns_of, size)

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
        assert np.allclose(vec, codec.stored(want / np.linalg.norm(want)), atol=1e-6)  # as stored
        assert kb.search("river 3", mode="fts", limit=3).ids[0] in {"b3", "b10", "b17"}
        assert kb.count() == 253 and kb.backend.integrity_problems() == []
        with pytest.raises(InvalidInputError):  # an existing id fails the whole COPY
            kb.add_many(_items(100, 200))
        assert kb.count() == 253


def test_a_batch_as_large_as_the_store_rebuilds_the_vector_index(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "INDEX_REBUILD_MIN", 100)
    index_oid = "SELECT 'item_vectors_ivf'::regclass::oid"
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=50) as kb, \
            psycopg.connect(pg_url, autocommit=True) as conn:
        kb.add_many(_items(0, 120))  # crosses vector_index_min_rows: the index is built
        first = conn.execute(index_oid).fetchone()
        kb.add_many(_items(200, 60))  # fewer than stored: into the live index
        assert conn.execute(index_oid).fetchone() == first
        kb.add_many(_items(400, 300))  # more than stored: dropped and built again
        second = conn.execute(index_oid).fetchone()
        assert second is not None and second != first
        assert conn.execute("SELECT count(*) FROM item_vectors").fetchone() == (480,)
        assert kb.backend.integrity_problems() == []
        query = np.asarray(_items(400, 1)[0]["vector"], dtype=np.float32)
        hits = named(kb.backend, kb.backend.vector_search(query / np.linalg.norm(query), _everywhere(), 10))
        assert len(hits) == 10 and hits[0][0] == "b400"


def _postings(conn: psycopg.Connection, corpus: str) -> list[tuple[object, ...]]:  # type: ignore[type-arg]
    """The BM25 index's postings of a corpus, by item id (rowids differ between loads)."""
    return conn.execute(
        "SELECT b.lexeme, b.bucket, i.id, e.nt, e.nb, e.dl FROM bm25_blocks b, "
        "unnest(b.rowids, b.nt, b.nb, b.dl) AS e (r, nt, nb, dl) JOIN items i ON i.rowid = e.r "
        "WHERE b.corpus = %s ORDER BY 1, 2, 3", [corpus]).fetchall()


def test_a_bulk_batch_indexes_as_rows_written_one_by_one(pg_url: str) -> None:
    """One COPY batch of 600 items and the same items added one at a time (INSERT) leave
    the same BM25 postings, counts and top-k scores, before and after a merge."""
    from hybridkb.textquery import parse

    def batch(corpus: str) -> list[dict[str, object]]:
        rows = _items(0, 600)
        for k, row in enumerate(rows):
            row.update(id=f"{corpus}{k}", corpus=corpus,
                       text=f"{row['text']} " + " ".join(f"w{(k * j) % 97}" for j in range(k % 23)))
        return rows

    with hybridkb.open(pg_url, embedder=None) as kb, psycopg.connect(pg_url) as conn:
        kb.add_many(batch("bulk"), batch_size=600)
        for row in batch("rows"):
            kb.add_many([row])  # one INSERT statement per item
        bulk_postings, row_postings = _postings(conn, "bulk"), _postings(conn, "rows")
        assert len(bulk_postings) > 5000
        assert [(*p[:2], str(p[2])[4:], *p[3:]) for p in bulk_postings] == \
            [(*p[:2], str(p[2])[4:], *p[3:]) for p in row_postings]  # ids without the corpus
        assert kb.backend.integrity_problems() == []
        queries = ["river w3 w5", "bulk item", "w7 w11 w13 w17 w19", "river 3"]

        def ranked(corpus: str) -> list[list[tuple[str, float]]]:
            area = SearchArea(corpora=(corpus,), filters=Filters(), now=2e9)
            return [[(i[len(corpus):], s)
                     for i, s in named(kb.backend, kb.backend.text_search(parse(q), area, 20))]
                    for q in queries]

        before = ranked("bulk")
        assert all(before) and before == ranked("rows")
        kb.backend.optimize()
        assert ranked("bulk") == before == ranked("rows")
        assert conn.execute("SELECT count(*) FROM bm25_blocks WHERE corpus = 'rows'").fetchone() == \
            conn.execute("SELECT count(*) FROM bm25_blocks WHERE corpus = 'bulk'").fetchone()


def test_a_bulk_batch_failing_midway_leaves_nothing(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Items and their BM25 postings are written before the vectors: a failure there rolls
    back all of it, and the store is as before."""
    state = ("SELECT (SELECT count(*) FROM items), (SELECT coalesce(sum(n), 0) FROM bm25_blocks), "
             "(SELECT count(*) FROM bm25_blocks), (SELECT sum(n_docs) FROM corpus_stats), "
             "(SELECT count(*) FROM item_vectors)")
    with hybridkb.open(pg_url, embedder=None) as kb, psycopg.connect(pg_url, autocommit=True) as conn:
        kb.add_many(_items(0, 300))
        before = conn.execute(state).fetchone()
        copied: list[int] = []
        real = bulk.copy_items

        def then_fail(conn: psycopg.Connection, columns_of: Callable[[int, int], list[list[object]]],  # type: ignore[type-arg]
                      size: int) -> object:
            written = real(conn, columns_of, size)
            copied.append(conn.execute("SELECT count(*) FROM items").fetchone()[0])
            return written

        def broken(*args: object) -> None:
            raise psycopg.errors.DiskFull("no space left for the vectors")

        monkeypatch.setattr(bulk, "copy_items", then_fail)
        monkeypatch.setattr(bulk, "copy_vectors", broken)
        with pytest.raises(hybridkb.StoreError):
            kb.add_many(_items(1000, 500), batch_size=500)
        assert copied == [800]  # the items and their postings were in, inside the transaction
        assert conn.execute(state).fetchone() == before
        assert kb.backend.integrity_problems() == []
        monkeypatch.undo()
        kb.add_many(_items(1000, 500), batch_size=500)
        assert kb.count() == 800 and kb.backend.integrity_problems() == []


def test_a_store_indexed_before_migration_004_is_carried_over(pg_empty_url: str) -> None:
    """Blocks written under migration 003 (with bucket counts) get their counts; the index
    stays exact through later writes, deletes and a merge."""
    from hybridkb.storage import migrations
    from hybridkb.textquery import parse

    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (name text PRIMARY KEY, "
                     "applied_at double precision NOT NULL DEFAULT extract(epoch FROM now()))")
        for name, script in migrations.load("postgres"):
            if name.startswith("004"):
                break
            conn.execute(script)
            conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", [name])
        conn.execute("INSERT INTO items (id, corpus, text, created_at, updated_at, content_hash) "
                     "SELECT 'p' || k, 'c', 'old river ' || k % 7 || ' w' || k % 13, 0, 0, 'h' "
                     "FROM generate_series(1, 300) AS k")
        conn.execute("DELETE FROM items WHERE id IN ('p5', 'p6')")
        assert conn.execute("SELECT to_regclass('bm25_buckets') IS NOT NULL").fetchone() == (True,)
    with hybridkb.open(pg_empty_url, embedder=None) as kb, \
            hybridkb.open(pg_empty_url, embedder=None, bm25_search="exact") as exact:
        assert kb.backend.integrity_problems() == []
        kb.add_many([{**item, "corpus": "c"} for item in _items(0, 150)])
        kb.delete_many(["p7", "b3"])
        kb.backend.optimize()
        assert kb.backend.integrity_problems() == []
        area = SearchArea(corpora=("c",), filters=Filters(), now=2e9)
        for text in ("old river w3", "river 3", "w5 bulk", "item 12"):
            want = exact.backend.text_search(parse(text), area, 20)
            got = kb.backend.text_search(parse(text), area, 20)
            assert want and [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_a_copy_batch_as_large_as_the_store_rebuilds_the_gin_index(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GIN index of the tsvectors is dropped before a COPY batch at least as large as
    the store and built again in the same transaction: present and used afterwards, the
    same answers as the exact statement; a smaller batch goes into the live index, and a
    batch failing after its COPY (in the build itself, or later) leaves the old index as it
    was."""
    monkeypatch.setattr(bulk, "GIN_REBUILD_MIN", 100)
    index_oid = "SELECT to_regclass('items_tsv')::oid"
    from hybridkb.textquery import parse

    with hybridkb.open(pg_url, embedder=None) as kb, \
            hybridkb.open(pg_url, embedder=None, bm25_search="exact") as exact, \
            psycopg.connect(pg_url, autocommit=True) as conn:
        first = conn.execute(index_oid).fetchone()
        kb.add_many(_items(0, 150), batch_size=150)  # 150 >= 0 stored: rebuilt
        second = conn.execute(index_oid).fetchone()
        assert second is not None and second[0] is not None and second != first
        kb.add_many(_items(200, 120), batch_size=120)  # 120 < 150 stored: live index
        assert conn.execute(index_oid).fetchone() == second
        kb.add_many(_items(400, 300), batch_size=300)  # 300 >= 270: rebuilt
        third = conn.execute(index_oid).fetchone()
        assert third is not None and third[0] is not None and third != second
        definition = conn.execute("SELECT pg_get_indexdef('items_tsv'::regclass)").fetchone()
        assert definition == ("CREATE INDEX items_tsv ON public.items USING gin (tsv)",)
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT rowid FROM items WHERE tsv @@ to_tsquery('english', 'river')"))
        assert "items_tsv" in plan
        area = _everywhere()
        for text in ("river 3", "bulk item 450", "river"):
            got, want = (sorted((round(score, 9), i) for i, score in store.backend.text_search(
                parse(text), area, 20)) for store in (kb, exact))
            assert got and got == want  # the same hits and scores (to the last bits)
        assert kb.backend.integrity_problems() == []
        with monkeypatch.context() as patch:  # the build fails: so does the batch
            patch.setattr(bulk, "CREATE_GIN", "CREATE INDEX items_tsv ON items USING gin (nothing)")
            with pytest.raises(hybridkb.StoreError):
                kb.add_many(_items(2000, 700), batch_size=700)
        assert conn.execute(index_oid).fetchone() == third and kb.count() == 570

        def broken(*args: object) -> None:
            raise psycopg.errors.DiskFull("no space left for the vectors")

        monkeypatch.setattr(bulk, "copy_vectors", broken)
        with pytest.raises(hybridkb.StoreError):
            kb.add_many(_items(1000, 700), batch_size=700)
        assert conn.execute(index_oid).fetchone() == third and kb.count() == 570
        assert kb.backend.integrity_problems() == []


def test_a_first_batch_reads_the_vector_dimension_once(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store without vectors yet: `add_many` checks each item's vector against the
    dimension, which it reads once, not once per item."""
    from hybridkb.storage.postgres.backend import PostgresBackend

    reads: list[int] = []
    real = PostgresBackend._dim

    def counted(conn: psycopg.Connection) -> int | None:  # type: ignore[type-arg]
        reads.append(1)
        return real(conn)

    monkeypatch.setattr(PostgresBackend, "_dim", staticmethod(counted))
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many(_items(0, 400), batch_size=400)
        assert kb.count() == 400 and kb.backend.vector_dim() == 16
    assert len(reads) <= 5


def test_the_store_merges_only_buckets_of_many_blocks_and_optimize_all(pg_url: str) -> None:
    """A merge as the store grows leaves a bucket of two or three small blocks alone (large
    batches leave few blocks) and merges one of four or more; `optimize()` merges any two.
    Answers and the index's postings stay the same throughout."""
    from hybridkb.storage.postgres import merging
    from hybridkb.textquery import parse

    blocks = ("SELECT count(*), max(c), sum(n) FROM (SELECT count(*) AS c, sum(n) AS n FROM bm25_blocks "
              "GROUP BY lexeme, corpus, bucket) AS k")
    area = _everywhere()
    queries = ["river 3", "bulk item", "river"]
    with hybridkb.open(pg_url, embedder=None) as kb, psycopg.connect(pg_url, autocommit=True) as conn:
        for start in (0, 1000, 2000):
            kb.add_many(_items(start, 150), batch_size=150)
        keys, most, postings = conn.execute(blocks).fetchone()
        assert most == 3
        before = [kb.backend.text_search(parse(t), area, 30) for t in queries]
        kb.backend._write(lambda c: merging.compact(c, merging.AUTO_MIN_BLOCKS))
        assert conn.execute(blocks).fetchone() == (keys, 3, postings)  # nothing merged
        fourth = _items(3000, 150)
        for row in fourth:
            row["text"] = str(row["text"]).replace("river", "stream")  # same lengths, no "river"
        kb.add_many(fourth, batch_size=150)
        kb.backend._write(lambda c: merging.compact(c, merging.AUTO_MIN_BLOCKS))
        per_key = conn.execute("SELECT lexeme, max(c) FROM (SELECT lexeme, count(*) AS c FROM bm25_blocks "
                               "GROUP BY lexeme, corpus, bucket) AS k GROUP BY lexeme").fetchall()
        most = dict(per_key)
        assert most["bulk"] == most["item"] == 1 and most["river"] == 3  # 4 -> 1; 3 stay
        river = [kb.backend.text_search(parse(t), area, 30) for t in queries]
        assert all(river) and all(before)
        kb.backend.optimize()
        assert conn.execute(blocks).fetchone()[1] == 1
        assert kb.backend.integrity_problems() == []
        assert [kb.backend.text_search(parse(t), area, 30) for t in queries] == river


@pytest.mark.parametrize("by_client", [False, True])
def test_packed_postings_follow_every_write_to_a_block(
        pg_url: str, by_client: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`packed` (migrations 006, 015, 016) holds the four arrays as the client parses them,
    whether the trigger's statement or the client (a COPY batch's blocks) wrote the block,
    through inserts, a delete and a text change rewriting blocks, and a merge; top-k reads
    it."""
    from hybridkb.storage.postgres import bulk
    from hybridkb.storage.postgres.blockcache import Block
    from hybridkb.textquery import parse

    monkeypatch.setattr(bulk, "BM25_BY_CLIENT", by_client)

    def mismatched(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int, int]:
        blocks = conn.cursor(binary=True).execute(
            "SELECT n, packed, rowids, nt, nb, dl FROM bm25_blocks WHERE rowids IS NOT NULL"
        ).fetchall()
        bad = 0
        for n, packed, *arrays in blocks:
            block = Block.parse(packed, n)
            parsed = [block.ids.tolist(), block.nt.tolist(), block.nb.tolist(), block.dl.tolist()]
            bad += parsed != [list(a) for a in arrays]
        return bad, len(blocks)

    with hybridkb.open(pg_url, embedder=None) as kb, \
            hybridkb.open(pg_url, embedder=None, bm25_search="exact") as exact, \
            psycopg.connect(pg_url, autocommit=True) as conn:
        kb.add_many(_items(0, 200), batch_size=200)
        kb.add_many(_items(500, 20), batch_size=10)
        kb.delete_many([f"b{k}" for k in range(0, 200, 3)])
        kb.add_many([{"id": "b1", "text": "a river changed its course"}], replace=True)
        bad, total = mismatched(conn)  # blocks rewritten by the delete, not merged yet
        assert bad == 0 and total > 50
        kb.backend.optimize()
        bad, total = mismatched(conn)
        assert bad == 0 and total > 50
        area = _everywhere()
        for text in ("river 3", "river course", "bulk item 505"):
            got, want = (sorted((round(s, 9), i) for i, s in store.backend.text_search(
                parse(text), area, 20)) for store in (kb, exact))
            assert got and got == want


def test_items_written_one_at_a_time_get_their_blocks_merged(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each small write adds a block per posting; once SMALL_WRITES_MERGE rows were written
    since the last merge, the write that reaches it merges the buckets of many blocks (an
    add_many in small batches only at its end), and answers stay those of scoring every
    match."""
    from hybridkb.storage.postgres import merging

    monkeypatch.setattr(merging, "SMALL_WRITES_MERGE", 40)
    river = "SELECT count(*) FROM bm25_blocks WHERE lexeme = 'river'"
    with hybridkb.open(pg_url, embedder=None) as kb, \
            hybridkb.open(pg_url, embedder=None, bm25_search="exact") as exact, \
            psycopg.connect(pg_url, autocommit=True) as conn:
        for row in _items(0, 39):
            kb.upsert(str(row["text"]), id=str(row["id"]), title=str(row["title"]))
        assert conn.execute(river).fetchone()[0] == 39  # one block per write so far
        kb.upsert("bulk item 39 river 4", id="b39", title="T39")
        merged = conn.execute(river).fetchone()[0]
        assert merged < 10, merged
        assert conn.execute("SELECT value FROM meta WHERE key = %s",
                            [merging.META_COMPACTED_ROWS]).fetchone() is not None
        kb.upsert("a river again", id="b0")  # an upsert draws a row too; no merge yet
        assert conn.execute(river).fetchone()[0] == merged + 1
        for query in ("river 3", "bulk river", "item 12"):
            assert kb.search(query, mode="fts", limit=20).ids == exact.search(query, mode="fts", limit=20).ids
        # 60 items in batches of 3: 20 write statements, one merge at the end
        kb.add_many([{"text": f"river batch {k}", "id": f"r{k}"} for k in range(60)], batch_size=3)
        assert conn.execute(river).fetchone()[0] < merged + 10
        assert kb.search("river batch", mode="fts", limit=30).ids == \
            exact.search("river batch", mode="fts", limit=30).ids
        assert kb.backend.integrity_problems() == []


def test_an_add_many_in_small_batches_merges_at_its_end_not_per_batch(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb.storage.postgres import merging

    monkeypatch.setattr(merging, "SMALL_WRITES_MERGE", 10)
    merges: list[int] = []
    real = merging.compact

    def counted(conn: object, *args: object, **kwargs: object) -> None:
        merges.append(1)
        real(conn, *args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(merging, "compact", counted)
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many(_items(0, 100), batch_size=5)  # 100 rows: ten times the threshold
        assert len(merges) == 1
        kb.add("one more river")
        assert len(merges) == 1  # 1 row since the merge
