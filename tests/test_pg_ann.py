"""The PostgreSQL vector index (storage/postgres/ann.py): IVFFlat, its probes measured per
build, built again as the store grows, rebuilt by optimize() and repair."""

from __future__ import annotations

import time

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from named import named
from pgvector.psycopg import register_vector

import hybridkb
from hybridkb.cli import cli
from hybridkb.model import Filters
from hybridkb.storage import codec
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.postgres import ann

DIM = 32


def _clustered(n: int, seed: int = 3, centers: int = 40) -> np.ndarray:
    """Unit vectors in `centers` clusters: what real embeddings look like to an IVF index."""
    rng = np.random.default_rng(seed)
    middle = rng.standard_normal((centers, DIM))
    rows = middle[rng.integers(0, centers, n)] + 0.6 * rng.standard_normal((n, DIM))
    out: np.ndarray = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return out


def _items(vectors: np.ndarray, start: int = 0) -> list[dict[str, object]]:
    return [{"id": f"v{start + k}", "text": f"item {start + k}", "vector": v}
            for k, v in enumerate(vectors)]


def _meta(url: str, key: str) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = %s", [key]).fetchone()
    return row[0] if row else None


def _index_oid(url: str) -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('item_vectors_ivf')::oid").fetchone()
    return row[0] if row else None


def test_exact_kth_scores_from_the_binary_copy_match_numpy(pg_url: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ann, "_BLOCK_ROWS", 70)  # several blocks and a ragged last one
    vectors = _clustered(500)
    queries = _clustered(7, seed=9)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=10**6) as kb:
        kb.add_many(_items(vectors))
    with psycopg.connect(pg_url) as conn:
        register_vector(conn)
        got = ann.kth_exact(conn, queries, DIM)
    want = -np.sort(-(queries @ codec.stored(vectors).T), axis=1)[:, ann.K - 1]  # as stored
    assert np.allclose(got, want, atol=1e-5)


def test_a_build_measures_its_probes_and_searches_find_the_true_neighbours(pg_url: str) -> None:
    both = _clustered(3030)  # queries from the same clusters as the items, as real ones are
    vectors, queries = both[:3000], both[3000:]
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=1000) as kb:
        kb.add_many(_items(vectors), batch_size=3000)
        assert _index_oid(pg_url) is not None
        probes, recall = int(_meta(pg_url, ann.META_PROBES) or 0), float(_meta(pg_url, ann.META_RECALL) or 0)
        lists = int(_meta(pg_url, ann.META_LISTS) or 0)
        assert lists == ann.lists_for(3000) and probes in ann.rungs(lists)
        assert recall >= ann.RECALL_TARGET and _meta(pg_url, ann.META_ROWS) == "3000"
        area = SearchArea(corpora=None, filters=Filters(), now=time.time())
        found = 0
        for q in queries:
            exact = {f"v{k}" for k in np.argsort(-(vectors @ q))[:10]}
            found += len(exact & {i for i, _ in named(kb.backend, kb.backend.vector_search(q, area, 10))})
        assert found / (10 * len(queries)) >= 0.9


def test_the_index_is_built_again_once_the_store_has_grown_fourfold(pg_url: str) -> None:
    vectors = _clustered(3000)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=500) as kb:
        kb.add_many(_items(vectors[:600]), batch_size=600)
        first = _index_oid(pg_url)
        assert first is not None and _meta(pg_url, ann.META_ITEMS) == "600"
        kb.add_many(_items(vectors[600:1800], 600), batch_size=500)  # 1,800 < 4 x 600
        assert _index_oid(pg_url) == first
        kb.add_many(_items(vectors[1800:], 1800), batch_size=500)  # 2,800 >= 4 x 600 after two
        assert _index_oid(pg_url) not in (None, first)
        assert int(_meta(pg_url, ann.META_ITEMS) or 0) >= 2400
        assert kb.backend.integrity_problems() == []


def test_optimize_and_repair_build_a_missing_index(pg_url: str) -> None:
    vectors = _clustered(800)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=500) as kb:
        kb.add_many(_items(vectors), batch_size=800)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP INDEX item_vectors_ivf")
        problems = kb.backend.integrity_problems()
        assert problems == ["800 vectors but no vector index"]
        assert kb.backend.repair() == ["built the vector index"]
        assert _index_oid(pg_url) is not None and kb.backend.integrity_problems() == []
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP INDEX item_vectors_ivf")
        kb.optimize()
        assert _index_oid(pg_url) is not None and kb.backend.integrity_problems() == []


def test_the_cli_optimize_reports_the_vector_index(pg_url: str) -> None:
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=10**6) as kb:
        kb.add_many(_items(_clustered(700)), batch_size=700)  # below the default: no index
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", pg_url, "optimize"])
    assert out.exit_code == 0, out.output
    assert "BM25 index: blocks merged" in out.output
    assert "vector index: 700 vectors, exact scan, already current" in out.output
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=500) as kb:
        report = kb.optimize()
    assert report["vector_index_built"] and report["first_pass"] == "ivfflat"
    assert report["lists"] == ann.lists_for(700) and report["probe_recall"] >= ann.RECALL_TARGET
    again = runner.invoke(cli, ["--db", pg_url, "optimize"])
    assert f"IVFFlat, {report['lists']} lists, {report['probes']} probes" in again.output
    assert "already current" in again.output


def test_a_store_with_the_old_hnsw_index_gets_ivfflat(pg_url: str) -> None:
    """Migration 009 drops the HNSW index; until the IVFFlat index is built, searches scan
    exactly and `check` says so; the next write of vectors builds it."""
    vectors = _clustered(700)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=10**6) as kb:
        kb.add_many(_items(vectors[:600]), batch_size=600)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the store as migration 008 left it
        conn.execute("CREATE INDEX item_vectors_hnsw ON item_vectors USING hnsw (embedding vector_cosine_ops)")
        conn.execute("DELETE FROM schema_migrations WHERE name LIKE '009%'")
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=500) as kb:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('item_vectors_hnsw')").fetchone() == (None,)
        assert kb.backend.integrity_problems() == ["600 vectors but no vector index"]
        area = SearchArea(corpora=None, filters=Filters(), now=time.time())
        best = named(kb.backend, kb.backend.vector_search(vectors[3], area, 1))
        assert best[0][0] == "v3"  # an exact scan meanwhile
        kb.add_many(_items(vectors[600:], 600), batch_size=100)
        assert _index_oid(pg_url) is not None and kb.backend.integrity_problems() == []


def test_pseudo_queries_are_stored_vectors_moved_away_from_their_cluster() -> None:
    rows = _clustered(2000)
    got = ann.moved_queries(rows)
    assert got.shape == (ann.SAMPLE, DIM) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    nearest = (got @ rows.T).max(axis=1)  # the row each was moved from, or one closer
    assert np.all(nearest >= ann.MOVED_COS - 1e-5) and np.all(nearest < 0.99)
    assert np.array_equal(got, ann.moved_queries(rows))  # the same rows give the same queries
    assert np.allclose(np.linalg.norm(ann.moved_queries(rows[:3]), axis=1), 1.0, atol=1e-5)


def test_the_index_is_over_half_precision_vectors_and_knn_queries_use_it(pg_url: str) -> None:
    vectors = _clustered(1200)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=1000) as kb:
        kb.add_many(_items(vectors), batch_size=1200)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'item_vectors_ivf'").fetchone()
        assert row is not None and f"halfvec({DIM})" in row[0] and "halfvec_cosine_ops" in row[0]
        area = SearchArea(corpora=None, filters=Filters(), now=time.time())
        plan = kb.backend.explain_vector_search(vectors[5], area, 10)
        assert "item_vectors_ivf" in plan, plan
        best = named(kb.backend, kb.backend.vector_search(vectors[5], area, 3))
        assert best[0][0] == "v5" and abs(best[0][1] - 1.0) < 1e-4  # re-scored exactly (the stored values)


def test_a_store_with_the_full_precision_index_gets_the_half_precision_one(pg_url: str) -> None:
    """Migration 010 drops the IVFFlat index over `vector` (KNN queries order by the
    half-precision expression, which it cannot serve) and its measurement; the next write
    of vectors builds the new one."""
    vectors = _clustered(700)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=10**6) as kb:
        kb.add_many(_items(vectors[:600]), batch_size=600)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the store as migration 009 left it
        conn.execute("CREATE INDEX item_vectors_ivf ON item_vectors USING ivfflat "
                     "(embedding vector_cosine_ops) WITH (lists = 10)")
        conn.execute("INSERT INTO meta (key, value) VALUES ('pg_ivf_probes', '3')")
        conn.execute("DELETE FROM schema_migrations WHERE name LIKE '010%'")
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=500) as kb:
        assert _index_oid(pg_url) is None and _meta(pg_url, ann.META_PROBES) is None
        assert kb.backend.integrity_problems() == ["600 vectors but no vector index"]
        kb.add_many(_items(vectors[600:], 600), batch_size=100)
        assert _index_oid(pg_url) is not None and kb.backend.integrity_problems() == []
        assert _meta(pg_url, ann.META_PROBES) is not None


@pytest.mark.parametrize(("dim", "indexed"), [(2500, True), (ann.MAX_DIM + 1, False)])
def test_vectors_past_halfvec_s_limit_are_searched_exactly(pg_url: str, dim: int, indexed: bool) -> None:
    """2,500 dimensions were past pgvector's limit for an index on `vector` (2,000); its
    limit for `halfvec` is 4,000, past which the store keeps scanning exactly."""
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((40, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=20) as kb:
        kb.add_many(_items(rows), batch_size=40)
        assert (_index_oid(pg_url) is not None) is indexed
        area = SearchArea(corpora=None, filters=Filters(), now=time.time())
        assert named(kb.backend, kb.backend.vector_search(rows[7], area, 1))[0][0] == "v7"
        assert kb.backend.integrity_problems() == []


def test_filtered_probes_grow_as_the_filter_keeps_less() -> None:
    assert ann.filtered_probes(32, None) == 32  # no filter beyond corpus, expiry, staleness
    assert ann.filtered_probes(32, (1_000_000, 1_000_000)) == 32
    assert ann.filtered_probes(32, (410_000, 1_000_000)) == 191  # ceil(32 / 0.41**2)
    assert ann.filtered_probes(32, (200_000, 1_000_000)) == 32 * ann.FILTERED_PROBES_MAX
    assert ann.filtered_probes(32, (0, 1_000_000)) == 32 * ann.FILTERED_PROBES_MAX


def test_a_broad_filter_probes_more_lists(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter keeping half the rows searches the index with more probes than measured
    for unfiltered queries: its nearest rows lie in lists farther away."""
    from hybridkb.storage.postgres.backend import PostgresBackend

    vectors = _clustered(1200)
    items = [{**item, "metadata": {"half": k % 2}} for k, item in enumerate(_items(vectors))]
    used: list[int] = []
    real = PostgresBackend._knn

    def spy(conn: object, query: object, area: object, limit: int, probes: int,
            explain: bool = False) -> object:
        used.append(probes)
        return real(conn, query, area, limit, probes, explain)  # type: ignore[arg-type]

    with hybridkb.open(pg_url, embedder=None, vector_index_min_rows=1000) as kb:
        kb.add_many(items, batch_size=1200)
        measured = int(_meta(pg_url, ann.META_PROBES) or 0)
        monkeypatch.setattr(PostgresBackend, "_knn", staticmethod(spy))
        everywhere = SearchArea(corpora=None, filters=Filters(), now=time.time())
        half = SearchArea(corpora=None, filters=Filters(metadata=(("half", (1,)),)), now=time.time())
        kb.backend.vector_search(vectors[5], everywhere, 10)
        hits = named(kb.backend, kb.backend.vector_search(vectors[7], half, 10))
    assert measured > 0 and used[0] == measured and used[1] > measured
    assert len(hits) == 10 and all(int(i[1:]) % 2 == 1 for i, _ in hits)
