"""BM25 blocks built in the client for COPY batches (postings.py) against the insert
trigger's own statement: the same table, the same answers."""

from __future__ import annotations

import random

import numpy as np
import psycopg
import pytest

import hybridkb
from hybridkb.model import Filters
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import bulk, postings
from hybridkb.textquery import parse

BLOCKS = ("SELECT lexeme, corpus, bucket, lo, hi, n, rowids, nt, nb, dl, packed "
          "FROM bm25_blocks ORDER BY lexeme, corpus, bucket, lo")
WORDS = ["river", "stone", "node", "js", "migration", "run", "running", "ran", "the", "a",
         "data", "store", "café", "naïve", "東京都", "京都", "서울", "データベース", "x" * 40]


@pytest.fixture(autouse=True)
def _blocks_by_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path is on by default (bulk.BM25_BY_CLIENT); these tests run it whatever the
    default, and load the other store through the trigger explicitly."""
    monkeypatch.setattr(bulk, "BM25_BY_CLIENT", True)


def _text(rng: random.Random, words: int) -> str:
    parts = []
    for _ in range(words):
        roll = rng.random()
        if roll < 0.5:
            parts.append(rng.choice(WORDS))
        elif roll < 0.9:
            parts.append(f"w{int(rng.paretovariate(1.1)) % 3000}")
        else:
            parts.append(f"{rng.choice(WORDS)}_{rng.randrange(50)}.py")
    return " ".join(parts)


def _random_items(seed: int, n: int) -> list[dict[str, object]]:
    """Several corpora; titles or none; CJK; words repeated past every count class (a
    tsvector keeps 256 positions a lexeme); long documents across many length classes;
    texts of stopwords only (no postings)."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for k in range(n):
        shape = rng.random()
        if shape < 0.05:
            text = "the a of and"
        elif shape < 0.1:
            text = " ".join(["river"] * rng.choice([7, 8, 11, 12, 15, 16, 23, 24, 31, 32, 63, 64, 127, 128, 129, 255, 256, 300]))
        elif shape < 0.15:
            text = " ".join(f"u{j}" for j in range(rng.randrange(60, 6000)))
        else:
            text = _text(rng, rng.randrange(1, 60))
        title = rng.choice([None, "", _text(rng, rng.randrange(1, 6)), "river " * rng.randrange(1, 12)])
        out.append({"id": f"r{seed}-{k}", "corpus": rng.choice(["wiki", "code", "日本"]),
                    "title": title, "text": text})
    return out


def _load(url: str, batches: list[list[dict[str, object]]], by_client: bool,
          monkeypatch: pytest.MonkeyPatch, part: int = bulk.COPY_PART,
          statement: int = postings.INSERT_POSTINGS) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(bulk, "BM25_BY_CLIENT", by_client)
        patch.setattr(bulk, "COPY_PART", part)
        patch.setattr(postings, "INSERT_POSTINGS", statement)
        with hybridkb.open(url, embedder=None) as kb:
            for batch in batches:
                kb.add_many(batch, batch_size=len(batch))


@pytest.mark.parametrize(("seed", "part", "statement"),
                         [(1, bulk.COPY_PART, postings.INSERT_POSTINGS), (2, 170, 700)])
def test_client_blocks_equal_the_trigger_blocks(pg_url: str, pg_empty_url: str, seed: int,
                                                part: int, statement: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fresh stores loaded with the same COPY batches, one through the trigger, one
    through postings.py (each batch in one COPY and one statement of blocks, or in parts
    of 170 rows whose postings are joined, the blocks in statements of about 700
    postings): the same bm25_blocks rows, byte for byte, `packed` included (rowids agree: both stores
    number their rows alike); then the same after deletes, updates and a merge, and the
    same top-k answers, equal to scoring every match, and the same postings after a merge."""
    items = _random_items(seed, 900)
    batches = [items[:500], items[500:650], items[650:]]
    _load(pg_url, batches, False, monkeypatch)
    _load(pg_empty_url, batches, True, monkeypatch, part, statement)
    with psycopg.connect(pg_url) as old, psycopg.connect(pg_empty_url) as new:
        want, got = old.execute(BLOCKS).fetchall(), new.execute(BLOCKS).fetchall()
        assert len(want) > 3000 and got == want
        buckets = {r[2] for r in want}
        assert {r[2] // 128 % 16 for r in want} >= set(range(15))  # every text count class
        assert {r[2] // 2048 for r in want} >= set(range(6))  # every title count class
        assert len({r[2] % 128 for r in want}) >= 15 and len(buckets) > 200  # length classes
    doomed = [str(it["id"]) for it in items[::7]]
    changed = [{**it, "text": f"changed {it['text']} stone"} for it in items[3::11]]
    queries = ["river stone", "東京都", "node js", "w1 w2 w3", "migration_12.py", "café data",
               "x" * 40, "u17 u1200 river"]
    answers = []
    for url in (pg_url, pg_empty_url):
        with hybridkb.open(url, embedder=None) as kb, \
                hybridkb.open(url, embedder=None, bm25_search="exact") as exact:
            kb.delete_many(doomed)
            kb.upsert_many(changed)
            assert kb.backend.integrity_problems() == []
            area = SearchArea(corpora=("wiki", "code", "日本"), filters=Filters(), now=2e9)
            ranked = []
            for text in queries:
                got_hits = kb.backend.text_search(parse(text), area, 50)
                want_hits = exact.backend.text_search(parse(text), area, 50)
                assert got_hits and [s for _, s in got_hits] == pytest.approx(
                    [s for _, s in want_hits], rel=1e-9)
                ranked.append(got_hits)
            answers.append(ranked)
            kb.backend.optimize()
    assert answers[0] == answers[1]
    # After the merge the same postings in the same number of blocks per key. Not the same
    # order inside a merged block: a delete leaves a block's lo as it was, so an update's new
    # block can share it, and the merge concatenates blocks of equal lo in the order it
    # meets them (the heap's, which differs between the two stores).
    postings_of = ("SELECT b.lexeme, b.corpus, b.bucket, e.r, e.t, e.x, e.d FROM bm25_blocks b, "
                   "unnest(b.rowids, b.nt, b.nb, b.dl) AS e (r, t, x, d) ORDER BY 1, 2, 3, 4")
    per_key = "SELECT lexeme, corpus, bucket, count(*) FROM bm25_blocks GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    with psycopg.connect(pg_url) as old, psycopg.connect(pg_empty_url) as new:
        assert new.execute(postings_of).fetchall() == old.execute(postings_of).fetchall()
        assert new.execute(per_key).fetchall() == old.execute(per_key).fetchall()


def test_client_blocks_equal_the_trigger_statement_in_one_store(pg_url: str) -> None:
    """The blocks of one COPY batch, and those the trigger's statement computes from the
    same rows in the same database (rolled back). With the trigger function's work_mem: an
    aggregate that spills to disk lists a block's rowids out of order (the client always
    lists them in rowid order, the trigger's order whenever its aggregate fits in memory)."""
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many(_random_items(7, 400), batch_size=400)
    with psycopg.connect(pg_url) as conn:
        got = conn.execute(BLOCKS).fetchall()
        conn.execute("SET LOCAL work_mem = '64MB'")
        conn.execute("DELETE FROM bm25_blocks")
        conn.execute("DO $$ BEGIN EXECUTE hybridkb_bm25_sql('add', 'items'); END $$")
        assert conn.execute(BLOCKS).fetchall() == got and len(got) > 1000
        conn.rollback()


def test_the_trigger_writes_again_after_a_copy(pg_url: str) -> None:
    """The switch is local to the COPY: a later statement of the same transaction, and
    the next transaction on the same connection, go through the trigger."""
    with hybridkb.open(pg_url, embedder=None) as kb, psycopg.connect(pg_url) as conn:
        kb.add_many(_random_items(3, 200), batch_size=200)
        conn.execute(postings.SET_BY_CLIENT, ["on"])
        conn.execute(postings.SET_BY_CLIENT, ["off"])
        conn.execute("INSERT INTO items (id, corpus, text, created_at, updated_at, content_hash) "
                     "VALUES ('late', 'wiki', 'river stone', 0, 0, 'h')")
        assert conn.execute("SELECT count(*) FROM bm25_blocks WHERE rowids @> ARRAY["
                            "(SELECT rowid FROM items WHERE id = 'late')]").fetchone() == (2,)
        conn.rollback()
        conn.execute(postings.SET_BY_CLIENT, ["on"])
        conn.commit()
        assert conn.execute("SELECT current_setting(%s, true)", [postings.BY_CLIENT]).fetchone() \
            in {("",), (None,), ("off",)}
        conn.rollback()
        assert kb.backend.integrity_problems() == []


def test_parse_reads_what_unnest_reads(pg_url: str) -> None:
    """tsvectorsend parsed in numpy against unnest(tsv) on the server, posting by posting."""
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many(_random_items(5, 300), batch_size=300)
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT rowid FROM items ORDER BY rowid").fetchall()
        rowids = np.array([r[0] for r in rows])
        want = conn.execute("SELECT p.rowid, p.lexeme, p.corpus, p.nt, p.nb, p.dl, p.bucket "
                            "FROM items d, hybridkb_postings(d.rowid, d.corpus, d.tsv) AS p").fetchall()
        p = postings.read(conn, rowids[::-1].tolist())
        got = sorted(zip(rowids[p.item].tolist(), [p.lexemes[k].decode() for k in p.lexeme],
                         [p.corpora[i] for i in p.item], p.nt.tolist(), p.nb.tolist(),
                         p.dl.tolist(), p.bucket.tolist(), strict=True))
        assert got == sorted(want) and len(got) > 5000
        half = len(rows) // 2  # parts joined: the same postings
        rest = postings.read(conn, rowids[half:].tolist())
        joined = postings.join([postings.read(conn, rowids[:half].tolist()), rest])

        def listed(p: postings.Postings) -> list[tuple[object, ...]]:
            return sorted(zip(p.item.tolist(), [p.lexemes[k] for k in p.lexeme], p.nt.tolist(),
                              p.nb.tolist(), p.dl.tolist(), p.bucket.tolist(), strict=True))

        assert listed(joined) == listed(p) and joined.corpora == p.corpora
    empty = postings.parse([], [], np.zeros(1, np.int64))
    assert empty.item.size == 0 and postings.Blocks(empty).params(np.zeros(0, np.int64))


def test_the_client_packs_blocks_as_the_server_does(pg_url: str) -> None:
    """postings.pack against hybridkb_pack_postings (migration 015), block by block: narrow
    blocks (offsets from the smallest rowid, past 2^32 too), wide ones (a span of 2^31 - 1
    or more: 8-byte rowids from 0), one posting, extreme counts."""
    hybridkb.open(pg_url, embedder=None).close()  # the schema, with the function
    rng = random.Random(11)
    blocks = [[5_000_000_000, 5_000_000_001, 5_000_000_007], [1, 3_000_000_000, 3_000_000_042],
              [7, 2_147_483_654], [7, 2_147_483_653], [2**62, 2**62 + 9], [77],
              sorted(rng.sample(range(1, 10**6), 300))]
    rowids = np.array([r for b in blocks for r in b], np.int64)
    nt = np.array([rng.choice([0, 1, 32767]) for _ in rowids], np.int64)
    nb = np.array([rng.choice([0, 5, 300, 32767]) for _ in rowids], np.int64)
    dl = np.array([rng.choice([1, 40, 2**31 - 1]) for _ in rowids], np.int64)
    sizes = np.array([len(b) for b in blocks])
    first = np.cumsum(sizes) - sizes
    packed, starts = postings.pack(rowids, nt, nb, dl, first, first + sizes - 1)
    ends = [*starts[1:].tolist(), len(packed)]
    with psycopg.connect(pg_url) as conn:
        for k, (a, b) in enumerate(zip(first.tolist(), (first + sizes).tolist(), strict=True)):
            want = conn.execute(
                "SELECT hybridkb_pack_postings(%s::bigint[], %s::smallint[], %s::smallint[], "
                "%s::integer[])", [rowids[a:b].tolist(), nt[a:b].tolist(), nb[a:b].tolist(),
                                   dl[a:b].tolist()]).fetchone()
            assert want is not None and packed[starts[k]:ends[k]] == want[0], blocks[k][:3]
