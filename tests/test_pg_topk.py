"""PostgreSQL's top-k BM25 (impact-ordered index) returns what scoring every match returns."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import psycopg
import pytest
from named import named

import hybridkb
from hybridkb import KnowledgeBase
from hybridkb.model import Filters
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import topk
from hybridkb.textquery import parse

WORDS = [f"w{i}" for i in range(400)]


def _text(rng: random.Random, n: int) -> str:
    # Zipf-like: a few words are in most documents, most words in few.
    return " ".join(WORDS[min(int(rng.paretovariate(0.8)) - 1, len(WORDS) - 1)] for _ in range(n))


def _items(seed: int, n: int, corpus: str = "c") -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"id": f"{corpus}{seed}-{i:05d}", "corpus": corpus, "text": _text(rng, rng.randint(3, 80)),
             "title": _text(rng, rng.randint(1, 4)) if rng.random() < 0.5 else None,
             "kind": rng.choice(["note", "decision"]), "stale": rng.random() < 0.05}
            for i in range(n)]


@pytest.fixture
def stores(pg_url: str) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    fast = hybridkb.open(pg_url, embedder=None)
    exact = hybridkb.open(pg_url, embedder=None, bm25_search="exact")
    yield fast, exact
    fast.close()
    exact.close()


def _queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = [" ".join(rng.choice(WORDS[:60]) for _ in range(rng.randint(1, 12))) for _ in range(n)]
    out += ["w1 w2", "w0", "w399 w398", "w3-w4 w5", '"w0 w1" w7', "w2 w2 w2", "the of"]
    return out


def _same(fast: KnowledgeBase, exact: KnowledgeBase, area: SearchArea, queries: list[str],
          limit: int) -> int:
    """Compare both paths; returns how many queries had results."""
    nonempty = 0
    for text in queries:
        a = exact.backend.text_search(parse(text), area, limit)
        b = fast.backend.text_search(parse(text), area, limit)
        assert [s for _, s in b] == pytest.approx([s for _, s in a], rel=1e-9), text
        # The same documents, except where scores tie (up to the last bit of a float sum,
        # which the two paths add in different orders) at the cut-off.
        got, want = dict(b), dict(a)
        for doc in got.keys() ^ want.keys():
            assert got.get(doc, want.get(doc)) == pytest.approx(a[-1][1], rel=1e-9), text
        for doc in got.keys() & want.keys():
            assert got[doc] == pytest.approx(want[doc], rel=1e-9), text
        nonempty += bool(a)
    return nonempty


@pytest.mark.parametrize("read", ["one-round", "rounds", "parts"])
def test_topk_equals_scoring_every_match(stores: tuple[KnowledgeBase, KnowledgeBase],
                                         pg_url: str, read: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb.storage.postgres import fulltext

    if read == "rounds":  # bounded rounds, as queries whose terms hold very many postings take
        monkeypatch.setattr(fulltext, "FULL_READ", 0)
        monkeypatch.setattr(fulltext, "FIRST_BUDGET", 200)
    if read == "parts":  # one round in several pipelined statements, as large queries read
        monkeypatch.setattr(fulltext, "PART_MIN", 1)
    fast, exact = stores
    fast.add_many(_items(1, 1500), batch_size=500)
    fast.add_many(_items(2, 300, corpus="d"), batch_size=100)
    area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
    for limit in (1, 10, 300):
        assert _same(fast, exact, area, _queries(limit, 25), limit) >= 25
    both = SearchArea(corpora=("c", "d"), filters=Filters(), now=time.time())
    assert _same(fast, exact, both, _queries(7, 15), 50) >= 15
    everywhere = SearchArea(corpora=None, filters=Filters(include_stale=True), now=time.time())
    assert _same(fast, exact, everywhere, _queries(8, 15), 50) >= 15
    # Filters beyond expiry/staleness go through the index, checked row by row (forced
    # here: by default the planner's estimate decides, and a selective one scores every match).
    forced = hybridkb.open(pg_url, embedder=None, filtered_exact_rows=0)
    try:
        for filters in (Filters(kinds=("note",)), Filters(kinds=("decision",), include_stale=True)):
            area = SearchArea(corpora=("c",), filters=filters, now=time.time())
            assert _same(forced, exact, area, _queries(9, 15), 20) >= 15
            assert _same(fast, exact, area, _queries(10, 5), 20) >= 5
    finally:
        forced.close()


def test_topk_is_the_path_taken_and_reads_less(stores: tuple[KnowledgeBase, KnowledgeBase],
                                               pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, exact = stores
    fast.add_many(_items(3, 2000), batch_size=1000)
    fast.backend.optimize()  # type: ignore[attr-defined]
    with psycopg.connect(pg_url) as conn:
        n_blocks, n_keys = conn.execute(
            "SELECT count(*), count(DISTINCT (lexeme, corpus, bucket)) FROM bm25_blocks").fetchone()
        rows = conn.execute("SELECT b.bucket, e.nt, e.nb, e.dl FROM bm25_blocks b, "
                            "unnest(b.nt, b.nb, b.dl) AS e (nt, nb, dl)").fetchall()
    assert n_blocks == n_keys  # merged: one block per bucket (none holds 8,192 postings)
    import numpy as np

    bucket, nt, nb, dl = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    for avgdl in (3.0, 40.0):  # the server's buckets and topk's bounds agree
        assert (topk.bucket_bounds(bucket, (2.0, 1.0), avgdl)
                >= topk.saturation((2.0 * nt + nb).astype(float), dl.astype(float), avgdl)).all()
    from hybridkb.storage.postgres import fulltext

    area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
    reads: list[int] = []
    original = fulltext._Run._weigh

    def counting(self: fulltext._Run, rows: list[object]) -> int:
        got = original(self, rows)  # the postings of one statement's blocks
        reads.append(got)
        return got

    monkeypatch.setattr(fulltext._Run, "_weigh", counting)
    monkeypatch.setattr(fulltext, "FIRST_BUDGET", 50)  # rounds of at least 8 * limit postings
    monkeypatch.setattr(fulltext, "FULL_READ", 0)  # else a query this small reads all at once
    query = parse("w0 w1 w8 w30 w250")
    hits = fast.backend.text_search(query, area, 10)
    expected = exact.backend.text_search(query, area, 10)
    assert [h[0] for h in hits] == [h[0] for h in expected]
    assert [h[1] for h in hits] == pytest.approx([h[1] for h in expected], rel=1e-9)
    with psycopg.connect(pg_url) as conn:
        postings = conn.execute(
            "SELECT sum(n) FROM bm25_blocks WHERE lexeme IN ('w0', 'w1', 'w8', 'w30', 'w250')"
        ).fetchone()[0]
    assert len(hits) == 10 and reads
    assert sum(reads) < postings / 2  # stopped well before reading every posting

    # Under FULL_READ postings, one statement reads them all and the answer is the same.
    monkeypatch.setattr(fulltext, "FULL_READ", postings)
    reads.clear()
    again = fast.backend.text_search(query, area, 10)
    assert [h[0] for h in again] == [h[0] for h in hits]
    assert [h[1] for h in again] == pytest.approx([h[1] for h in hits], rel=1e-12)
    assert reads == [postings]
    monkeypatch.setattr(fulltext, "FULL_READ", postings - 1)
    reads.clear()
    assert [h[0] for h in fast.backend.text_search(query, area, 10)] == [h[0] for h in hits]
    assert len(reads) > 1 and sum(reads) < postings


def test_writes_keep_the_index_current(stores: tuple[KnowledgeBase, KnowledgeBase],
                                       pg_url: str) -> None:
    fast, exact = stores
    fast.add_many(_items(4, 600), batch_size=200)
    fast.backend.optimize()  # type: ignore[attr-defined]
    fast.upsert("w5 w5 w5 brandnew", id="c4-00003", corpus="c", title="brandnew")
    assert fast.delete_many(["c4-00004", "c4-00010"]) == 2
    fast.add_many(_items(5, 50), batch_size=10)
    with psycopg.connect(pg_url) as conn:  # another transaction's rows, a corpus move
        conn.execute("UPDATE items SET corpus = 'moved' WHERE id = 'c4-00020'")
        conn.execute("UPDATE items SET access_count = access_count + 1")  # no text change
    area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
    assert named(fast.backend, fast.backend.text_search(parse("brandnew"), area, 5))[0][0] == "c4-00003"
    assert all(h[0] not in ("c4-00004", "c4-00010", "c4-00020")
               for h in named(fast.backend, fast.backend.text_search(parse("w0 w1"), area, 1000)))
    assert _same(fast, exact, area, _queries(11, 20), 30) >= 20
    assert fast.backend.integrity_problems() == []  # type: ignore[attr-defined]
    with psycopg.connect(pg_url) as conn:  # damage: the index no longer matches the items
        conn.execute("DELETE FROM bm25_blocks WHERE lexeme = 'w1'")
    problems = fast.backend.integrity_problems()  # type: ignore[attr-defined]
    assert any("BM25 index" in p for p in problems), problems
    assert "rebuilt the BM25 index from the items" in fast.backend.repair()  # type: ignore[attr-defined]
    assert fast.backend.integrity_problems() == []  # type: ignore[attr-defined]
    assert _same(fast, exact, area, _queries(12, 10), 30) >= 10
    with psycopg.connect(pg_url) as conn:  # damage: packed bytes cut short, written past the trigger
        conn.execute("ALTER TABLE bm25_blocks DISABLE TRIGGER bm25_blocks_pack")
        conn.execute("UPDATE bm25_blocks SET packed = substring(packed FROM 1 FOR 20) "
                     "WHERE lexeme = 'w2'")
        conn.execute("ALTER TABLE bm25_blocks ENABLE TRIGGER bm25_blocks_pack")
    problems = fast.backend.integrity_problems()  # type: ignore[attr-defined]
    assert any("packed postings" in p for p in problems), problems
    assert "rebuilt the BM25 index from the items" in fast.backend.repair()  # type: ignore[attr-defined]
    assert fast.backend.integrity_problems() == []  # type: ignore[attr-defined]


def test_bucket_bounds_hold_for_any_statistics() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    nt = rng.integers(0, 12, 5000)
    nb = rng.integers(0, 245, 5000)  # a tsvector keeps at most 256 positions per lexeme
    dl = rng.integers(1, 5000, 5000)
    nt_class = np.select([nt < 4, nt < 8], [nt, 4], 5)
    nb_class = np.select([nb < 8, nb < 12, nb < 16, nb < 24, nb < 32, nb < 64, nb < 128],
                         [nb, 8, 9, 10, 11, 12, 13], 14)
    bucket = (nt_class * 16 + nb_class) * 128 + np.minimum(127, np.floor(2 * np.log2(dl))).astype(int)
    for avgdl in (1.0, 7.5, 120.0, 4000.0):
        for weights in ((1.0, 1.0), (2.0, 1.0), (0.0, 1.0)):
            tf = weights[0] * nt + weights[1] * nb
            actual = topk.saturation(tf.astype(float), dl.astype(float), avgdl)
            assert (topk.bucket_bounds(bucket, weights, avgdl) >= actual).all()


def test_seen_bounds_match_a_per_term_reckoning() -> None:
    """Seen.bounds sums per posting; reckoned here term by term for each document."""
    import numpy as np

    rng = np.random.default_rng(1)
    for _ in range(20):
        n_terms = int(rng.integers(1, 7))
        exact = rng.random(n_terms) < 0.7
        unread = np.where(rng.random(n_terms) < 0.5, 0.0, rng.random(n_terms) * 3)
        seen = topk.Seen(n_terms)
        weights: dict[tuple[int, int], float] = {}
        for slot in range(n_terms):
            docs = rng.choice(60, int(rng.integers(0, 40)), replace=False).astype(np.int64)
            w = rng.random(len(docs)) * 5
            seen.add(slot, docs, w, bool(exact[slot]), np.ones(len(docs), dtype=np.int64))
            weights.update({(int(d), slot): float(x) for d, x in zip(docs, w, strict=True)})
        docs, lower, upper, known, held = seen.bounds(unread, exact)
        assert sorted({d for d, _ in weights}) == docs.tolist()
        for i, d in enumerate(docs.tolist()):
            slots = {s for (doc, s) in weights if doc == d}
            assert lower[i] == pytest.approx(sum(weights[d, s] for s in slots if exact[s]))
            want_upper = sum(weights[d, s] for s in slots) + sum(
                unread[s] for s in range(n_terms) if s not in slots)
            assert upper[i] == pytest.approx(want_upper * (1 + 1e-9), rel=1e-12)
            assert upper[i] >= want_upper
            assert known[i] == (all(s in slots or unread[s] == 0 for s in range(n_terms))
                                and all(exact[s] for s in slots))
            assert held[i] == any(exact[s] for s in slots)


def test_totals_equal_the_bounds_of_a_full_read() -> None:
    """Seen.totals (one pass, for a read of every posting) gives what Seen.bounds gives
    with nothing left unread: the same documents, sums, phrase bounds and flags, parts of
    a term added in any interleaving, dense and sparse rowids."""
    import numpy as np

    rng = np.random.default_rng(7)
    for case in range(30):
        n_terms = int(rng.integers(1, 6))
        exact = rng.random(n_terms) < (0.6 if case % 2 else 1.0)
        span = 10**12 if case % 3 == 0 else 200
        parts = []
        for slot in range(n_terms):
            docs = rng.choice(span, int(rng.integers(0, 60)), replace=False).astype(np.int64) + 1
            for piece in np.array_split(docs, int(rng.integers(1, 4))):
                parts.append((slot, piece, rng.random(len(piece)) * 5))
        order = rng.permutation(len(parts))
        seen, ordered = topk.Seen(n_terms), topk.Seen(n_terms)
        for i in order:  # interleaved, as pipelined parts arrive
            slot, docs, w = parts[i]
            seen.add(slot, docs, w, bool(exact[slot]), np.ones(len(docs), dtype=np.int64))
        for slot, docs, w in parts:  # term by term
            ordered.add(slot, docs, w, bool(exact[slot]), np.ones(len(docs), dtype=np.int64))
        docs, lower, phrase, held, phrased = seen.totals(exact)
        want_docs, want_lower, upper, known, want_held = ordered.bounds(np.zeros(n_terms), exact)
        assert docs.tolist() == want_docs.tolist()
        assert lower.tolist() == want_lower.tolist()  # to the last bit: same order of sums
        assert (lower + phrase) * (1 + topk.SLACK) == pytest.approx(upper, rel=1e-15)
        assert held.tolist() == want_held.tolist() and (~phrased).tolist() == known.tolist()


def test_reads_split_into_parts_of_about_equal_postings() -> None:
    from hybridkb.storage.postgres.fulltext import _parts

    assert _parts([10, 20], 4, 50_000) == [[0, 1]]  # too few postings to split
    assert _parts([100_000] * 8, 4, 50_000) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert _parts([300_000], 4, 50_000) == [[0]]
    parts = _parts([5, 90_000, 10, 70_000, 40_000, 3], 4, 50_000)
    assert [i for part in parts for i in part] == list(range(6)) and len(parts) <= 4
    assert all(part for part in parts)


def test_distinct_rowids_match_numpy_unique() -> None:
    """The dense marking of Seen.bounds gives np.unique's answer: dense and sparse rowids,
    repeats, a single posting, none."""
    import numpy as np

    rng = np.random.default_rng(16)
    cases = [rng.integers(1, 5_000, 20_000), rng.integers(1, 10**12, 500), np.array([7]),
             np.array([], dtype=np.int64), np.repeat(np.arange(100, 140), 3)[::-1].copy()]
    for rowids in cases:
        docs, at = topk._distinct(rowids.astype(np.int64))
        want_docs, want_at = np.unique(rowids.astype(np.int64), return_inverse=True)
        assert docs.tolist() == want_docs.tolist() and at.tolist() == want_at.tolist()
        assert docs.dtype == np.int64 and at.dtype == np.int64


@pytest.mark.parametrize("tail", ["bounds", "exact"])
def test_early_stop_keeps_the_top_exact_and_the_rest_true(
        pg_url: str, tail: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `bm25_exact_top`, the best `exact_top` are the exact statement's; the ranks below
    are true matches (the exact statement scores them) whose scores are not above their
    exact scores, best first; and the reading stops before the last posting."""
    from hybridkb.storage.postgres import fulltext

    monkeypatch.setattr(fulltext, "EARLY_FULL_READ", 0)  # a store this small is read whole
    monkeypatch.setattr(fulltext, "FIRST_BUDGET", 200)
    read: list[tuple[int, int, int]] = []  # postings read, of the terms, scored early
    original = fulltext._Run.run

    def counting(self: fulltext._Run) -> object:
        out = original(self)
        read.append((self.postings, sum(int(p.counts.sum()) for p in self.plans), len(self.scored)))
        return out

    monkeypatch.setattr(fulltext._Run, "run", counting)
    k = 10
    fast = hybridkb.open(pg_url, embedder=None, bm25_exact_top=k, bm25_tail=tail,
                         filtered_exact_rows=0)
    exact = hybridkb.open(pg_url, embedder=None, bm25_search="exact")
    try:
        fast.add_many(_items(13, 2500), batch_size=500)
        fast.add_many(_items(14, 400, corpus="d"), batch_size=200)
        fast.delete_many([f"c13-{i:05d}" for i in range(0, 2500, 97)])
        now = time.time()
        areas = [SearchArea(corpora=("c",), filters=Filters(), now=now),
                 SearchArea(corpora=("c", "d"), filters=Filters(include_stale=True), now=now),
                 SearchArea(corpora=("c",), filters=Filters(kinds=("note",)), now=now)]
        checked = 0
        for a_i, area in enumerate(areas):
            phrases = ['"w0 w1" w2 w3 w4 w5', '"w1 w0" "w2 w1" w6 w0 w3', '"w3 w0" w1 w2']
            for text in _queries(20 + a_i, 20) + phrases:
                query = parse(text)
                got = fast.backend.text_search(query, area, 300)
                every = dict(exact.backend.text_search(query, area, 100_000))
                want = exact.backend.text_search(query, area, 300)
                assert len(got) == len(want), text  # as many hits as the exact path
                head = got[:k]
                assert [s for _, s in head] == pytest.approx([s for _, s in want[:k]], rel=1e-9), text
                for doc, score in head:  # the same documents up to ties at the cut
                    assert score == pytest.approx(every[doc], rel=1e-9), text
                    if doc not in dict(want[:k]):
                        assert score == pytest.approx(want[k - 1][1], rel=1e-9), text
                assert len({d for d, _ in got}) == len(got), text
                for doc, score in got[k:]:
                    assert doc in every, (text, doc)  # a true match
                    assert score <= every[doc] * (1 + 1e-9), (text, doc)
                    assert score <= head[-1][1] * (1 + 1e-9), (text, doc)
                assert [s for _, s in got[k:]] == sorted((s for _, s in got[k:]), reverse=True)
                if tail == "exact":
                    for doc, score in got:
                        assert score == pytest.approx(every[doc], rel=1e-9), (text, doc)
                checked += bool(want)
        assert checked >= 60
        assert any(n < total for n, total, _ in read)  # the early stop did stop early
        assert any(scored for _, _, scored in read)  # and scored some candidates on the way
    finally:
        fast.close()
        exact.close()


def test_length_bounds_hold() -> None:
    """length_upper and length_unseen_bound never fall below a score a document could
    still reach: postings drawn at random into buckets, some buckets read, the rest not."""
    import numpy as np

    rng = np.random.default_rng(7)
    weights = (2.0, 1.0)
    for _ in range(30):
        n_docs, n_terms = 200, int(rng.integers(1, 6))
        dl = rng.integers(1, 3000, n_docs).astype(np.int64)
        avgdl = float(rng.uniform(5, 500))
        holds = rng.random((n_docs, n_terms)) < 0.4  # which documents hold which terms
        read = np.zeros((n_docs, n_terms), dtype=bool)  # postings read
        weight = np.zeros((n_docs, n_terms))
        plans = []
        for j in range(n_terms):
            nt = rng.integers(0, 10, n_docs)
            nb = rng.integers(0, 200, n_docs)
            nt_class = np.select([nt < 4, nt < 8], [nt, 4], 5)
            nb_class = np.select([nb < 8, nb < 12, nb < 16, nb < 24, nb < 32, nb < 64, nb < 128],
                                 [nb, 8, 9, 10, 11, 12, 13], 14)
            bucket = (nt_class * 16 + nb_class) * 128 + np.minimum(
                127, np.floor(2 * np.log(dl) / np.log(2.0))).astype(np.int64)
            idf = float(rng.uniform(0.1, 5))
            weight[:, j] = holds[:, j] * idf * topk.saturation(
                (2.0 * nt + nb).astype(float), dl.astype(float), avgdl)
            keys, counts = np.unique(bucket[holds[:, j]], return_counts=True)
            plan = topk.plan_term(j + 1, f"t{j}", True, idf, keys.astype(np.int64),
                                  counts.astype(np.int64), weights, avgdl)
            plan.read = int(rng.integers(0, len(keys) + 1))
            plans.append(plan)
            read[:, j] = holds[:, j] & np.isin(bucket, plan.buckets[: plan.read])
        upper = topk.length_upper(plans, weights, avgdl, (weight * read).sum(axis=1),
                                  dl.astype(float), read)
        assert (upper >= weight.sum(axis=1)).all()  # a document's score: all it holds
        best_unseen = topk.length_unseen_bound(plans, weights, avgdl)
        assert best_unseen <= topk.unseen_bound(plans) + 1e-12
        never = ~read.any(axis=1)  # documents no posting read has shown
        if never.any():
            assert best_unseen >= weight[never].sum(axis=1).max()


def test_searches_see_other_connections_writes(pg_url: str) -> None:
    """Another connection's delete, insert, and emptying of the items table with its
    identity restarted (rowids given again to other items) show in the next search: the
    rowids a search names its hits by are read back as the items they are now."""
    area = SearchArea(corpora=("c",), filters=Filters(), now=time.time())
    reader = hybridkb.open(pg_url, embedder=None)
    writer = hybridkb.open(pg_url, embedder=None)
    try:
        writer.add_many([{"id": f"a{i}", "corpus": "c", "text": f"w1 w2 alpha{i}"} for i in range(5)])
        query = parse("w1")
        assert {h for h, _ in named(reader.backend, reader.backend.text_search(query, area, 10))} == {
            f"a{i}" for i in range(5)}
        writer.delete("a0")
        writer.add_many([{"id": "b0", "corpus": "c", "text": "w1 beta"}])
        assert {h for h, _ in named(reader.backend, reader.backend.text_search(query, area, 10))} == {
            "a1", "a2", "a3", "a4", "b0"}
        with psycopg.connect(pg_url, autocommit=True) as conn:  # a store emptied and refilled
            conn.execute("TRUNCATE items, bm25_blocks, corpus_stats RESTART IDENTITY CASCADE")
        writer.add_many([{"id": f"z{i}", "corpus": "c", "text": f"w1 zeta{i}"} for i in range(6)])
        hits = reader.backend.text_search(query, area, 10)
        exact = hybridkb.open(pg_url, embedder=None, bm25_search="exact")
        try:
            want = exact.backend.text_search(query, area, 10)
            assert [s for _, s in hits] == pytest.approx([s for _, s in want], rel=1e-9)
        finally:
            exact.close()
        assert {h for h, _ in named(reader.backend, hits)} == {f"z{i}" for i in range(6)}
    finally:
        reader.close()
        writer.close()


def test_essential_top_equals_summing_every_posting(monkeypatch: pytest.MonkeyPatch) -> None:
    """MaxScore over postings at hand (topk.essential_top) keeps the documents the sums of
    every posting keep (score reaching the k-th best among those not excluded), with the
    same scores to the bit; None only when no term can be left out."""
    import numpy as np

    rng = np.random.default_rng(7)
    left_out = []  # of each final scoring: whether some term's documents were left out
    scored = topk._scored

    def spy(terms: list[object], of: list[object], high: int) -> object:
        if len(terms) > 1 and len(of) < len(terms):
            left_out.append(len(of))
        return scored(terms, of, high)  # type: ignore[arg-type]

    monkeypatch.setattr(topk, "_scored", spy)
    for trial in range(300):
        n_docs = int(rng.integers(20, 3000))
        terms = []
        for _ in range(int(rng.integers(1, 7))):
            df = int(rng.integers(1, n_docs))
            ids = rng.choice(n_docs, size=df, replace=False).astype(np.int64) + 1
            weights = rng.gamma(2.0, float(rng.uniform(0.1, 5.0)), size=df)
            if trial % 3 == 0:  # ties: weights of few distinct values
                weights = np.round(weights)
            terms.append((ids, weights, float(weights.max())))
        excluded = np.sort(rng.choice(n_docs, size=int(rng.integers(0, 30)), replace=False)) + 1
        k = int(rng.choice([1, 10, 300]))
        found = topk.essential_top(terms, excluded.astype(np.int64), k)
        seen = topk.Seen(len(terms))
        for slot, (ids, weights, _) in enumerate(terms):
            seen.add(slot, ids, weights, True, np.ones(len(ids), dtype=np.int64))
        docs, lower, _, _, _ = seen.totals(np.ones(len(terms), dtype=bool))
        passing = ~np.isin(docs, excluded)
        theta = topk.threshold(lower, passing, k)
        want = passing & (lower * (1 + topk.SLACK) >= theta)
        got_docs, got_scores = found
        assert got_docs.tolist() == docs[want].tolist()
        assert got_scores.tolist() == lower[want].tolist()  # the same bits
    assert len(left_out) > 50  # the bound left terms out of many a query


@pytest.mark.parametrize("postings_per_row", [0, 10**9], ids=["tsvectors", "postings"])
def test_a_selective_filter_scores_only_its_rows_as_the_exact_statement(
        stores: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch,
        postings_per_row: int) -> None:
    """A filter keeping few rows: the rows it keeps are scored with the corpora's
    statistics (df from the index), from their tsvectors or from the terms' postings with
    every other document dropped, never by the exact statement over every match."""
    from hybridkb.storage.postgres import fulltext

    monkeypatch.setattr(fulltext, "SCOPED_POSTINGS_PER_ROW", postings_per_row)
    fast, exact = stores
    items = _items(11, 1200)
    for i, item in enumerate(items):
        item["metadata"] = {"team": "a" if i % 80 == 0 else "b"}
        item["kind"] = "rare" if i % 40 == 0 else item["kind"]  # 30 rows
    fast.add_many(items, batch_size=600)
    scoped: list[int] = []
    original = fulltext._Run.scoped
    monkeypatch.setattr(fulltext._Run, "scoped",
                        lambda self: scoped.append(1) or original(self))
    for filters in (Filters(kinds=("rare",)), Filters(kinds=("rare",),
                    metadata=(("team", ("a",)),), include_stale=True),
                    Filters(metadata=(("team", ("a", "c")),))):
        area = SearchArea(corpora=("c",), filters=filters, now=time.time())
        assert _same(fast, exact, area, [*_queries(12, 12), '"w0 w1"', '"w1 w2" "w0 w3"'], 40) >= 10
    assert len(scoped) >= 30  # phrase-only queries included: none fell back to the statement


def test_filters_count_by_the_rows_an_index_finds(pg_url: str) -> None:
    """Column filters by the planner's estimate, metadata filters by their containment
    form's (the GIN index on metadata finds those rows; the JSON equality itself the
    planner guesses at 0.5%, which would make every metadata filter look selective), path
    patterns by their literal prefixes (a pattern without one keeps every row)."""
    from hybridkb.storage.postgres import selectivity
    from hybridkb.storage.postgres import sql as pg_sql

    kb = hybridkb.open(pg_url, embedder=None)
    try:
        items = _items(13, 3000)
        for i, item in enumerate(items):
            team = "rare" if i % 100 == 0 else "most"
            item["metadata"] = {"team": team, "n": i % 2, "path": f"{team}/f{i}.py"}
            item["kind"] = "rare" if i % 100 == 1 else item["kind"]
        kb.add_many(items, batch_size=1000)
        with kb.backend._pool.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("ANALYZE items")

            def keeps(**filters: object) -> bool:
                area = SearchArea(corpora=("c",), filters=Filters(**filters),  # type: ignore[arg-type]
                                  now=time.time())
                return selectivity.keeps_many(conn, area, 20_000)

            assert keeps(metadata=(("team", ("most",)),)) and keeps(metadata=(("n", (1,)),))
            assert not keeps(metadata=(("team", ("rare",)),))
            assert keeps(kinds=("note", "decision"))
            assert not keeps(kinds=("rare",))
            assert not keeps(kinds=("rare",), metadata=(("team", ("most",)),))
            assert not keeps(kinds=("note", "decision"), metadata=(("team", ("rare",)),))
            many = tuple(f"v{i}" for i in range(pg_sql.CONTAINMENT_MAX_VALUES + 1))
            assert keeps(metadata=(("team", ("rare", *many)),))  # too many to write as containment
            plan = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN SELECT 1 FROM items i WHERE i.metadata @> %s::jsonb", ['{"team": "rare"}']))
            assert "items_metadata" in plan, plan
            assert not keeps(paths=("rare/**/*.py",)) and not keeps(paths=("rare/", "most/x"))
            assert keeps(paths=("most/",)) and keeps(paths=("*.py",))  # no prefix: every row
            assert keeps(paths=("rare/", "**/x.py"))
            # By default the most rows kept grows with the store: sqrt(5 * 300 * 3000) = 2,121
            assert selectivity.most_kept_rows(3000, 300) == pytest.approx(2121.3, abs=0.1)
            auto = SearchArea(corpora=("c",), filters=Filters(kinds=("rare",)), now=time.time())
            assert not selectivity.keeps_many(conn, auto, None)
            assert selectivity.keeps_many(conn, auto, 0) and selectivity.keeps_many(conn, auto, 10)
        with pytest.raises(hybridkb.InvalidInputError, match="filtered_exact_rows"):
            hybridkb.open(pg_url, embedder=None, filtered_exact_rows=-1)
            plan = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN SELECT 1 FROM items i WHERE (i.metadata ->> 'path') LIKE %s",
                ["rare/%"]))
            assert "items_path" in plan, plan
    finally:
        kb.close()
