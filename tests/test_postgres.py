"""PostgreSQL-specific behaviour, on the session's real server (conftest.pg_server).

Congruence with SQLite (the same items and queries on both), BM25's ingredients, the
vector index and filtered KNN, migrations, concurrent opens and writers, and the errors a user
sees when the driver or the server is missing.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kb_worker
import numpy as np
import psycopg
import pytest
from named import named

import hybridkb
from hybridkb import BackendUnavailableError, HashingEmbedder, KnowledgeBase
from hybridkb.model import parse_filters
from hybridkb.storage import migrations
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import backend as pg
from hybridkb.textquery import parse as parse_query

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
WORKER = str(Path(__file__).with_name("kb_worker.py"))
ORIGINAL_LOAD = migrations.load
WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud "
         "market ledger kernel socket thread cache index vector billing deploy migrate").split()


def scope(corpus: str = "default", **filters: Any) -> SearchArea:
    return SearchArea(corpora=(corpus,), filters=parse_filters(filters), now=time.time())


def sql(url: str, statement: str, params: Any = None) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


@pytest.fixture
def pair(tmp_path: Path, pg_url: str) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    """The same empty store on SQLite and on PostgreSQL."""
    a = hybridkb.open(str(tmp_path / "kb.db"), embedder=HashingEmbedder(64))
    b = hybridkb.open(pg_url, embedder=HashingEmbedder(64))
    yield a, b
    a.close()
    b.close()


def fill_both(pair: tuple[KnowledgeBase, KnowledgeBase], items: list[dict[str, Any]]) -> None:
    for kb in pair:
        kb.add_many(items)


def random_items(n: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"i{k:04d}", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))),
             "kind": rng.choice(["decision", "lesson", "memory"]),
             "metadata": {"n": k % 7, "even": k % 2 == 0}} for k in range(n)]


# -- congruence: the same calls on both backends ---------------------------------------------


def assert_same_ranking(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    """Same scores and the same ids in the same order, up to float32 noise.

    Items whose scores differ by under 1e-6 form a tie, compared as a set (numpy and
    pgvector add float32 products in different orders); a tie cut by the limit may keep
    different members (SQLite picks them with argpartition).
    """
    assert len(a) == len(b)
    np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-6)

    def ties(ranked: list[tuple[str, float]]) -> list[set[str]]:
        groups: list[set[str]] = []
        last = None
        for item_id, score in ranked:
            if last is None or last - score > 1e-6:
                groups.append(set())
            groups[-1].add(item_id)
            last = score
        return groups[:-1]  # the last group may be cut by the limit

    assert ties(a) == ties(b)


def test_vector_results_identical_on_a_small_set(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    fill_both(pair, random_items(300))
    rng = random.Random(2)
    for _ in range(20):
        query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
        vec = HashingEmbedder(64).embed_query(query)
        for filters in ({}, {"kind": "lesson"}, {"metadata": {"n": [1, 2]}}):
            a, b = (named(kb.backend, kb.backend.vector_search(vec, scope(**filters), 25)) for kb in pair)
            assert_same_ranking(a, b)


def test_substring_and_filter_results_identical(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    values: dict[str, Any] = {"t": True, "f": False, "one": 1, "zero": 0, "onef": 1.0, "s1": "1",
                              "two": 2, "half": 0.5, "s": "abc", "big": 2**60, "none": None,
                              "lst": [1, 2]}
    fill_both(pair, [{"id": k, "text": f"word {k} configuration", "metadata": {"x": v}}
                     for k, v in values.items()])
    for value in (True, False, 1, 0, 1.0, "1", 2, 2.0, 0.5, "abc", 2**60, 2**60 + 1, [1, "abc"]):
        filters = {"metadata": {"x": value}}
        a, b = (sorted(kb.search("word", mode="fts", filters=filters).ids) for kb in pair)
        assert a == b, value
    a, b = (named(kb.backend, kb.backend.substring_search(["figura", "wor"], scope(), 50)) for kb in pair)
    assert a == b and len(a) == len(values)


@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="shared dev data not found")
def test_fts_top_results_overlap_with_sqlite(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    """BM25 on tsvector vs FTS5: other stemmer and stopwords, so a measured overlap.

    Measured on this slice (500 SciFact docs, 50 queries): mean overlap of the top 10
    0.89, the same top hit for 96% of the queries (NFCorpus alike: 0.81 and 77%).
    """
    from hybridkb.evaluation import beir

    data = beir.load(DATA / "scifact")
    fill_both(pair, [{"id": d.id, "title": d.title, "text": d.text} for d in data.corpus[:500]])
    overlaps, same_top = [], []
    for query in data.queries[:50]:
        a, b = (kb.search(query.text, mode="fts", limit=10, dedup_threshold=None).ids for kb in pair)
        if a or b:
            overlaps.append(len(set(a) & set(b)) / max(len(a), len(b)))
            same_top.append(a[:1] == b[:1])
    assert sum(overlaps) / len(overlaps) >= 0.8
    assert sum(same_top) / len(same_top) >= 0.8


def test_identifiers_and_punctuation_match_like_sqlite(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    fill_both(pair, [
        {"id": "a", "text": "Run migration_032 before deploying"},
        {"id": "b", "text": "The node.js service reads src/flags.py", "title": "Node service"},
        {"id": "c", "text": "Emails go to ops@example.com; see RFC-2119 and IL-6 levels"},
        {"id": "d", "text": "Nothing relevant here at all"},
    ])
    for query, expected in (("migration_032", ["a"]), ("node.js", ["b"]), ("flags.py", ["b"]),
                            ("ops@example.com", ["c"]), ("RFC-2119", ["c"]), ("il-6", ["c"]),
                            ('"node service"', ["b"]), ("deploying migrations", ["a"])):
        for kb in pair:
            assert kb.search(query, mode="fts").ids == expected, (query, type(kb.backend))


# -- BM25 ingredients -----------------------------------------------------------------------


def test_term_frequency_function_counts_positions(pg_url: str) -> None:
    """hybridkb_tf (ts_rank inverted) equals the positions unnest() lists, title and all."""
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many([{"id": f"d{n}", "title": "zebra " * (n % 3), "text": ("zebra " * n) + "end"}
                     for n in range(0, 300, 7)])
    rows = sql(pg_url, """
        SELECT id, hybridkb_tf(tsv, 'zebra'::tsquery, '{1,1,1,1}'),
               hybridkb_tf(tsv, 'zebra'::tsquery, '{0,0,0,1}'),
               coalesce((SELECT cardinality(positions) FROM unnest(tsv) WHERE lexeme = 'zebra'), 0),
               coalesce((SELECT count(*) FROM unnest(tsv) u, unnest(u.weights) w
                         WHERE u.lexeme = 'zebra' AND w = 'A'), 0)
        FROM items""")
    assert len(rows) == 43
    for item_id, tf, tf_title, expected, expected_title in rows:
        # float32 precision: a lexeme's 256th position (the most a tsvector keeps) may read as 255
        assert tf_title == expected_title and (tf == expected or expected == tf + 1 == 256), item_id


def test_corpus_statistics_stay_exact_through_every_write(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64)) as kb:
        kb.add_many(random_items(120))
        kb.add_many([{"id": f"x{k}", "text": f"other corpus {k}", "corpus": "other", "ttl": 0.01}
                     for k in range(10)])
        kb.upsert_many([{"id": f"i{k:04d}", "text": "rewritten text", "corpus": "moved"}
                        for k in range(0, 120, 3)])
        kb.upsert_many([{"id": f"i{k:04d}", "text": "rewritten text", "corpus": "moved",
                         "kind": "lesson"} for k in range(0, 120, 3)])  # same text: no change
        kb.delete_many([f"i{k:04d}" for k in range(0, 120, 5)])
        kb.search("alpha beta", touch=True)
        time.sleep(0.02)
        assert kb.purge_expired() == 10
        assert kb.backend.integrity_problems() == []
        stats = dict((r[0], r[1]) for r in sql(
            pg_url, "SELECT corpus, sum(n_docs) FROM corpus_stats GROUP BY corpus"))
        assert {c: n for c, n in stats.items() if n} == kb.corpora()


def test_bm25_scores_positive_and_rarer_terms_rank_higher(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add_many([{"id": f"c{k}", "text": f"common words {k}"} for k in range(30)]
                    + [{"id": "rare", "text": "common words with a zanzibar"}])
        hits = named(kb.backend, kb.backend.text_search(parse_query("common zanzibar"), scope(), 50))
        assert hits[0][0] == "rare" and len(hits) == 31
        assert all(score > 0 for _, score in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_other_rankings_and_title_weights_are_options(pg_url: str) -> None:
    items = [{"id": "t", "title": "kernel", "text": "nothing else"},
             {"id": "x", "text": "kernel kernel words in the text of a longer body here"}]
    for options in ({"ranking": "ts_rank"}, {"ranking": "ts_rank_cd", "ts_normalization": 32},
                    {"bm25_weights": (3.0, 1.0)}, {"bm25_weights": (0.0, 1.0)}):
        with hybridkb.open(pg_url, embedder=None, **options) as kb:
            if not kb.count():
                kb.add_many(items)
            found = kb.search("kernel", mode="fts").ids
            assert sorted(found) == ["t", "x"], options
            if options.get("bm25_weights") == (3.0, 1.0):
                assert found[0] == "t"
    with pytest.raises(hybridkb.InvalidInputError, match="ranking"):
        hybridkb.open(pg_url, embedder=None, ranking="tfidf")


# -- vectors: IVFFlat, iterative scans, filters inside the query -------------------------------


def test_filtered_knn_fills_limit_through_the_vector_index(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 2000
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((n, 64)).astype(np.float32)
    # filtered_exact_rows=0: even a filter keeping 1% probes the index (by default, a filter
    # keeping fewer rows than selectivity.most_kept_rows is answered by an exact scan).
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64), vector_index_min_rows=1000,
                       filtered_exact_rows=0) as kb:
        kb.add_many(({"id": f"v{k}", "text": f"item {k}", "vector": vectors[k],
                      "metadata": {"bucket": k % 100}} for k in range(n)), batch_size=500)
        backend = kb.backend
        assert isinstance(backend, pg.PostgresBackend)
        assert sql(pg_url, "SELECT to_regclass('item_vectors_ivf') IS NOT NULL") == [(True,)]
        query = rng.standard_normal(64).astype(np.float32)
        query /= np.linalg.norm(query)

        plan = backend.explain_vector_search(query, scope(), 10)
        assert "item_vectors_ivf" in plan, plan

        calls: list[bool] = []
        real = pg.q.vector_search

        def spy(*args: Any, exact: bool) -> Any:
            calls.append(exact)
            return real(*args, exact=exact)

        monkeypatch.setattr(pg.q, "vector_search", spy)
        normed = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        keep = np.arange(n) % 100 == 7  # 1% of the items
        for limit in (10, 20):
            calls.clear()
            hits = named(backend, backend.vector_search(query, scope(metadata={"bucket": 7}), limit))
            assert len(hits) == limit
            assert calls == [False]  # the iterative index scan alone filled the limit
            assert all(int(i[1:]) % 100 == 7 for i, _ in hits)
            exact = np.argsort(-(normed[keep] @ query))[:limit]
            expected = {f"v{k}" for k in np.flatnonzero(keep)[exact]}
            assert len(expected & {i for i, _ in hits}) >= 0.8 * limit
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        # A filter matching fewer items than the limit: every one of them, exactly.
        hits = backend.vector_search(query, scope(metadata={"bucket": 7}, kind="none"), 10)
        assert hits == []
        few = backend.vector_search(query, scope(metadata={"bucket": [7, 8]}), 50)
        assert len(few) == 40
        assert backend.integrity_problems() == []


@pytest.mark.parametrize("option", ["vector_index_min_rows", "hnsw_min_rows"])  # and its old name
def test_vector_index_is_built_once_the_store_grows(pg_url: str, option: str) -> None:
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64), **{option: 100}) as kb:
        exists = "SELECT to_regclass('item_vectors_ivf') IS NOT NULL"
        kb.add_many(random_items(60))
        assert sql(pg_url, exists) == [(False,)]
        assert len(kb.search("alpha river", mode="vector", limit=5)) == 5
        kb.add_many(random_items(120, seed=3)[60:])
        assert sql(pg_url, exists) == [(True,)]
        assert len(kb.search("alpha river", mode="vector", limit=5)) == 5
        assert kb.backend.integrity_problems() == []


def test_vectors_too_wide_for_the_index_are_searched_exactly(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=HashingEmbedder(2048), vector_index_min_rows=0) as kb:
        kb.add_many(random_items(20))
        assert kb.search("alpha", mode="vector").ids
        assert kb.backend.integrity_problems() == []


def test_delete_and_upsert_keep_vectors_in_step(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64)) as kb:
        kb.add_many(random_items(30))
        kb.upsert("fresh text", id="i0001")
        kb.delete("i0002")
        n_vectors = sql(pg_url, "SELECT count(*) FROM item_vectors")[0][0]
        assert n_vectors == kb.count() == 29
        before = kb.backend.vectors_for(["i0003"])["i0003"]
        kb.upsert(kb.get("i0003").text, id="i0003", kind="lesson")  # same text: vector kept
        np.testing.assert_array_equal(kb.backend.vectors_for(["i0003"])["i0003"], before)
        assert kb.backend.integrity_problems() == []


# -- migrations, opening, concurrency --------------------------------------------------------


def test_migrations_are_recorded_and_applied_once(
        pg_empty_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pg_url = pg_empty_url
    names = [name for name, _ in migrations.load("postgres")]
    hybridkb.open(pg_url, embedder=None).close()
    recorded = [r[0] for r in sql(pg_url, "SELECT name FROM schema_migrations ORDER BY name")]
    assert recorded == names and names[0] == "001_items"
    extra = ("999_test", "CREATE TABLE migration_probe (x int); INSERT INTO migration_probe VALUES (1);")
    monkeypatch.setattr(migrations, "load", lambda backend: [*ORIGINAL_LOAD(backend), extra])
    for _ in range(2):
        hybridkb.open(pg_url, embedder=None).close()
    assert sql(pg_url, "SELECT count(*) FROM migration_probe") == [(1,)]
    assert sql(pg_url, "SELECT count(*) FROM schema_migrations WHERE name = '999_test'") == [(1,)]


def test_a_failing_migration_leaves_nothing_behind(
        pg_empty_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pg_url = pg_empty_url
    monkeypatch.setattr(migrations, "load", lambda backend: [
        *ORIGINAL_LOAD(backend), ("998_bad", "CREATE TABLE half_done (x int); SELECT 1/0;")])
    with pytest.raises(hybridkb.StoreError, match="division by zero"):
        hybridkb.open(pg_url, embedder=None)
    assert sql(pg_url, "SELECT to_regclass('items') IS NULL, to_regclass('half_done') IS NULL") \
        == [(True, True)]


def test_threads_opening_one_new_store_at_once(pg_empty_url: str) -> None:
    pg_url = pg_empty_url
    errors: list[BaseException] = []
    stores: list[KnowledgeBase] = []
    barrier = threading.Barrier(6)

    def opener(k: int) -> None:
        try:
            barrier.wait()
            kb = hybridkb.open(pg_url, embedder=HashingEmbedder(64))
            kb.upsert_many(random_items(20, seed=k), batch_size=5)  # the same ids: races
            kb.add_many([{"id": f"t{k}-{j}", "text": f"thread {k} wrote {j}"} for j in range(5)])
            stores.append(kb)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(stores) == 6
    kb = stores[0]
    assert kb.count() == 20 + 6 * 5 and kb.backend.vector_dim() == 64
    assert kb.backend.integrity_problems() == []
    assert sql(pg_url, "SELECT count(*) FROM schema_migrations") == [(len(migrations.load("postgres")),)]
    for store in stores:
        store.close()


def test_processes_write_and_read_one_store_concurrently(pg_empty_url: str) -> None:
    """Writers racing to create the store, a reader checking that no batch is half visible."""
    pg_url = pg_empty_url
    start_at = time.time() + 1.5
    rng = random.Random(11)

    def spawn(*args: str) -> subprocess.Popen[str]:
        env = {**__import__("os").environ, "KB_WORKER_START_AT": str(start_at)}
        return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)

    procs = [spawn("writer", pg_url, str(w), str(rng.randrange(2**31)), "1") for w in range(3)]
    procs.append(spawn("reader", pg_url, "0", str(rng.randrange(2**31)), "1"))
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{proc.args[2:]}:\n{out[-2000:]}\n{err[-4000:]}"
        outputs.append(out.splitlines())
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64)) as kb:
        assert kb.backend.integrity_problems() == []
        expected = 0
        for w, lines in enumerate(outputs[:3]):
            latest = {}
            for line in lines:
                if line.startswith("ok "):
                    event = json.loads(line.split(" ", 1)[1])
                    latest[event["batch"]] = event
            assert latest, f"writer {w} wrote nothing"
            for batch, event in latest.items():
                kb_worker.check_batch(kb, {"prefix": f"w{w}", "batch": batch, "size": event["size"]})
                expected += event["size"]
        assert kb.count() == expected
        assert kb.stats()["items_without_vectors"] == 0


def test_access_counts_from_threads_are_not_lost(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add("sharedtoken: one item everybody reads", id="sharedtoken")
        threads = [threading.Thread(target=lambda: [kb.search("sharedtoken", touch=True)
                                                    for _ in range(25)]) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert kb.get("sharedtoken").access_count == 100


def test_a_connection_killed_mid_write_is_a_clear_error_and_the_pool_recovers(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64)) as kb, \
            psycopg.connect(pg_url, autocommit=True) as admin, \
            psycopg.connect(pg_url, autocommit=True) as watcher:
        kb.add_many(random_items(10))
        admin.execute("BEGIN")
        admin.execute("LOCK TABLE items IN SHARE ROW EXCLUSIVE MODE")  # the next INSERT waits
        outcome: dict[str, BaseException] = {}

        def write() -> None:
            try:
                kb.add_many([{"id": f"new{k}", "text": f"new item {k}"} for k in range(5)])
            except BaseException as exc:
                outcome["error"] = exc

        writer = threading.Thread(target=write)
        writer.start()
        waiting: list[Any] = []
        for _ in range(500):
            waiting = watcher.execute(  # (outside the locking transaction: fresh stats)
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%'").fetchall()
            if waiting:
                break
            time.sleep(0.01)
        assert waiting, "the write never reached the lock"
        watcher.execute("SELECT pg_terminate_backend(%s)", [waiting[0][0]])
        admin.execute("ROLLBACK")
        writer.join(timeout=60)
        assert isinstance(outcome.get("error"), hybridkb.StoreError), outcome
        assert "PostgreSQL at" in str(outcome["error"])
        assert kb.count() == 10 and kb.get_many([f"new{k}" for k in range(5)]) == []

        kb.add("written after the kill", id="after")  # the pool replaced the connection
        # Every idle connection killed (as by a server restart): reads and writes go on.
        watcher.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert kb.search("written after the kill", mode="fts").ids[0] == "after"
        kb.add("and again", id="again")
        assert kb.count() == 12 and kb.backend.integrity_problems() == []


# -- what a user sees when something is missing ---------------------------------------------


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import hybridkb.storage.postgres as dialect

    for name in ("psycopg", "psycopg_pool", "pgvector.psycopg"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError
    for name in ("hybridkb.storage.postgres.backend", "hybridkb.storage.postgres.sql"):
        monkeypatch.delitem(sys.modules, name)  # imported afresh below, restored afterwards
    monkeypatch.setattr(dialect, "backend", pg)
    monkeypatch.setattr(dialect, "sql", pg.q)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'hybridkb\[postgres\]'"):
        hybridkb.open("postgresql://nobody@127.0.0.1:1/none", embedder=None)


@pytest.mark.parametrize("url", ["postgresql://someone:s3cret@127.0.0.1:1/kb",
                                 "postgres://127.0.0.1:1/kb?connect_timeout=2"])
def test_unreachable_server_is_a_clear_error(url: str) -> None:
    with pytest.raises(BackendUnavailableError) as caught:
        hybridkb.open(url, embedder=None, connect_timeout=2)
    message = str(caught.value)
    assert message.startswith("cannot connect to PostgreSQL at ") and "s3cret" not in message
    assert "Traceback" not in message and caught.value.__cause__ is None


def test_missing_database_and_bad_options_are_clear_errors(pg_url: str) -> None:
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        hybridkb.open(pg_url.rsplit("/", 1)[0] + "/no_such_db", embedder=None)
    with pytest.raises(hybridkb.InvalidInputError, match="nosuchparam"):
        hybridkb.open(pg_url + "?nosuchparam=1", embedder=None)
    with pytest.raises(TypeError):
        hybridkb.open(pg_url, embedder=None, colour="red")


def test_password_is_not_shown(pg_url: str) -> None:
    assert pg.redact("postgresql://u:secret@h:5/db?x=1") == "postgresql://u:***@h:5/db?x=1"
    assert pg.redact("postgresql://u@h/db") == "postgresql://u@h/db"
    with hybridkb.open(pg_url, embedder=None) as kb:
        assert kb.stats()["target"] == pg_url


def test_hybrid_search_runs_its_two_retrievals_at_once(pg_url: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with hybridkb.open(pg_url, embedder=HashingEmbedder(64)) as kb:
        kb.add_many(random_items(80))
        backend = kb.backend
        threads: list[str] = []
        real = pg.PostgresBackend.vector_search

        def spy(self: pg.PostgresBackend, *args: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real(self, *args)

        monkeypatch.setattr(pg.PostgresBackend, "vector_search", spy)
        together = kb.search("alpha river stone", mode="hybrid", limit=10)
        assert threads and threads[-1].startswith("hybridkb-retrieve")
        monkeypatch.setattr(backend, "retrieves_concurrently", False)
        apart = kb.search("alpha river stone", mode="hybrid", limit=10)
        assert threads[-1] == threading.current_thread().name
        assert together.ids == apart.ids and len(together.ids) == 10
        assert [h.score for h in together.hits] == [h.score for h in apart.hits]
