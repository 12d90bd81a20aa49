"""SQLite's derived vector index: a memory-mapped base (flat or HNSW) plus an exact delta.

Every answer is compared with brute force over the vectors SQLite holds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from named import named

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.model import now_ts, parse_filters
from hybridkb.storage import codec
from hybridkb.storage.contract import SearchArea
from hybridkb.storage.indexes import vector_recall
from hybridkb.storage.indexes import vectors as vectors_mod

DIM = 32


def unit_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, DIM)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def open_kb(path: Path, **options: object) -> KnowledgeBase:
    return hybridkb.open(str(path), embedder=HashingEmbedder(DIM), **options)  # type: ignore[arg-type]


def fill(kb: KnowledgeBase, n: int, seed: int = 1, prefix: str = "v") -> np.ndarray:
    m = unit_rows(n, seed)
    kb.add_many([{"id": f"{prefix}{i}", "text": f"item {i}", "vector": m[i],
                  "kind": "decision" if i % 4 == 0 else "lesson", "corpus": "a" if i % 5 else "b"}
                 for i in range(n)])
    return m


def brute(kb: KnowledgeBase, q: np.ndarray, k: int, allowed: set[str] | None = None) -> list[str]:
    stored = kb.backend.vectors_for([it.id for batch in kb.backend.iter_items() for it in batch])
    ids = [i for i in stored if allowed is None or i in allowed]
    scores = np.array([float(stored[i] @ q) for i in ids])
    order = np.lexsort((np.arange(len(ids)), -scores))[:k]
    return [ids[j] for j in order]


def vsearch(kb: KnowledgeBase, q: np.ndarray, k: int = 10, *, filters: dict[str, object] | None = None,
            corpora: list[str] | None = None) -> list[str]:
    area = SearchArea(tuple(corpora) if corpora else None, parse_filters(filters), now_ts())
    return [i for i, _ in named(kb.backend, kb.backend.vector_search(q, area, k))]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "kb.db"


def test_flat_base_and_delta_answer_exactly(db: Path) -> None:
    kb = open_kb(db)
    fill(kb, 400)
    queries = unit_rows(5, 99)
    for q in queries:
        assert vsearch(kb, q) == brute(kb, q, 10)
    base, delta = kb.backend._vectors.view(DIM)
    assert base is not None and base.ann is None and len(base) == 400 and len(delta) == 0
    # later writes: a new vector, a changed one, a deleted one -> the delta
    fresh = unit_rows(3, 7)
    kb.add_many([{"id": "new0", "text": "new", "vector": queries[0]}])
    kb.upsert_many([{"id": "v1", "text": "item 1 again", "vector": queries[1]}])
    kb.delete_many(["v2"])
    base, delta = kb.backend._vectors.view(DIM)
    assert len(delta) == 3
    assert vsearch(kb, queries[0])[0] == "new0"
    assert vsearch(kb, queries[1])[0] == "v1"
    for q in [*queries, *fresh]:
        assert vsearch(kb, q) == brute(kb, q, 10)
        assert "v2" not in vsearch(kb, q, 400)
    kb.close()


def test_filtered_search_is_an_exact_scan_of_the_filters_rows(db: Path) -> None:
    kb = open_kb(db)
    fill(kb, 300)
    decisions = {f"v{i}" for i in range(300) if i % 4 == 0}
    corpus_b = {f"v{i}" for i in range(300) if i % 5 == 0}
    for q in unit_rows(4, 5):
        assert vsearch(kb, q, filters={"kind": "decision"}) == brute(kb, q, 10, decisions)
        assert vsearch(kb, q, corpora=["b"]) == brute(kb, q, 10, corpus_b)
        assert vsearch(kb, q, corpora=["a"]) == brute(kb, q, 10, set(corpus_b ^ {f"v{i}" for i in range(300)}))
    kb.close()


def test_forced_graph_holds_recall_and_checks_filters(db: Path) -> None:
    kb = open_kb(db, vector_ann="on")
    fill(kb, 3000)
    base, _ = kb.backend._vectors.view(DIM)
    assert base is not None and base.ann is not None
    recalls = []
    for q in unit_rows(30, 11):
        got, want = vsearch(kb, q), brute(kb, q, 10)
        recalls.append(len(set(got) & set(want)) / 10)
    assert np.mean(recalls) >= 0.95
    kb.delete_many([f"v{i}" for i in range(0, 3000, 2)])  # half gone: tombstones in the delta
    alive = {f"v{i}" for i in range(1, 3000, 2)}
    for q in unit_rows(5, 12):
        got = vsearch(kb, q)
        assert len(got) == 10 and set(got) <= alive
    kb.close()



def test_graph_answers_carry_exact_scores_and_the_breadth_grows_with_the_base(db: Path) -> None:
    """The graph only picks rows (its f16 distances are approximate); each is scored on the
    stored vectors (half precision, codec.stored), as an exact scan and the delta score it."""
    kb = open_kb(db, vector_ann="on")
    m = codec.stored(fill(kb, 2000))
    area = SearchArea(None, parse_filters(None), now_ts())
    for q in unit_rows(10, 13):
        for item_id, score in named(kb.backend, kb.backend.vector_search(q, area, 10)):
            assert score == pytest.approx(float(m[int(item_id[1:])] @ q), abs=1e-6)  # graph: ~1e-3
    base, _ = kb.backend._vectors.view(DIM)
    assert base is not None and base.graph_ok and base.recall is not None and base.recall >= 0.95
    assert base.ef in vector_recall.LADDER and base.ann is not None
    assert base.ann.expansion_search == base.ef
    kb.close()


def test_a_graph_that_cannot_hold_the_recall_target_is_not_used(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build measures its graph (vector_recall.py); below the target at every breadth
    tried, searches scan the base exactly instead."""
    monkeypatch.setattr(vector_recall, "RECALL_TARGET", 1.01)  # no graph reaches it
    kb = open_kb(db, vector_ann="on")
    fill(kb, 1500)
    report = kb.optimize()
    assert report["graph"] is True and report["graph_used"] is False and report["graph_ef"] is not None
    for q in unit_rows(10, 14):
        assert vsearch(kb, q) == brute(kb, q, 10)  # exact, tie order included
    kb.close()


def test_graph_answers_skip_expired_and_stale_items(db: Path) -> None:
    kb = open_kb(db, vector_ann="on")
    m = fill(kb, 500)
    q = m[7]
    assert vsearch(kb, q)[0] == "v7"
    kb.upsert_many([{"id": "v7", "text": "item 7", "vector": m[7], "stale": True}])
    assert "v7" not in vsearch(kb, q)
    assert vsearch(kb, q, filters={"include_stale": True})[0] == "v7"
    kb.close()


def test_another_connection_sees_a_new_base_and_a_lost_base_is_rebuilt(db: Path) -> None:
    a = open_kb(db)
    fill(a, 200)
    q = unit_rows(1, 3)[0]
    expected = vsearch(a, q)
    b = open_kb(db)
    assert vsearch(b, q) == expected
    first = a.backend._changes.published("vectors")
    a.backend._vectors.build_now(DIM)
    second = a.backend._changes.published("vectors")
    assert first is not None and second is not None and first[0] != second[0]
    assert vsearch(b, q) == expected
    assert b.backend._vectors._base_key == second
    a.close()
    b.close()
    shutil.rmtree(db.with_name(db.name + ".idx") / "vectors")
    c = open_kb(db)
    assert c.backend.integrity_problems() and "vector index" in c.backend.integrity_problems()[0]
    assert vsearch(c, q) == expected
    assert c.backend._vectors.builds == 1
    assert c.backend.integrity_problems() == []
    c.close()


def test_a_big_delta_is_folded_into_a_new_base_in_the_background(db: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors_mod, "DELTA_MIN", 50)
    kb = open_kb(db)
    fill(kb, 100)
    q = unit_rows(1, 4)[0]
    vsearch(kb, q)
    fill(kb, 120, seed=2, prefix="w")
    assert vsearch(kb, q) == brute(kb, q, 10)  # answered from base + delta at once
    kb.backend._vectors.wait(60)
    base, delta = kb.backend._vectors.view(DIM)
    assert base is not None and len(base) == 220 and len(delta) == 0
    assert vsearch(kb, q) == brute(kb, q, 10)
    kb.close()


def test_memory_store_keeps_vectors_in_the_delta() -> None:
    kb = hybridkb.open(":memory:", embedder=HashingEmbedder(DIM))
    fill(kb, 50)
    q = unit_rows(1, 8)[0]
    assert vsearch(kb, q) == brute(kb, q, 10)
    base, delta = kb.backend._vectors.view(DIM)
    assert base is None and len(delta) == 50
    kb.close()


def test_unknown_ann_mode_is_a_clear_error(db: Path) -> None:
    with pytest.raises(hybridkb.InvalidInputError, match="vector_ann"):
        open_kb(db, vector_ann="sometimes")


_EXIT_WHILE_BUILDING = """
import sys, numpy as np, hybridkb
from hybridkb import HashingEmbedder
from hybridkb.storage.indexes import vector_base
vector_base.ANN_MIN_ROWS = 1_000  # a graph is due, built in the background
kb = hybridkb.open(sys.argv[1], embedder=HashingEmbedder(64))
m = np.random.default_rng(3).standard_normal((40_000, 64)).astype(np.float32)
kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i]} for i in range(len(m))])
kb.search("item 7", mode="vector")  # publishes a flat base, starts the graph build
print("searched", flush=True)
# exits without kb.close(), the graph build still running
"""


def test_a_process_exiting_during_a_background_graph_build_exits_cleanly(tmp_path: Path) -> None:
    """Native threads running at interpreter teardown abort the process (exit 134); an exit
    hook stops the build at its next step instead, and the next open publishes normally."""
    import subprocess
    import sys

    db = tmp_path / "kb.db"
    proc = subprocess.run([sys.executable, "-c", _EXIT_WHILE_BUILDING, str(db)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "searched" in proc.stdout and "terminate" not in proc.stderr
    assert not list((tmp_path / "kb.db.idx").rglob("*.tmp"))  # a cancelled build leaves nothing
    kb = hybridkb.open(str(db), embedder=HashingEmbedder(64))
    try:
        m = np.random.default_rng(3).standard_normal((40_000, 64)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        area = SearchArea(None, parse_filters(None), now_ts())
        for row in (7, 12_345, 39_999):  # a stored vector finds itself through any first pass
            assert named(kb.backend, kb.backend.vector_search(m[row], area, 1))[0][0] == f"v{row}"
        report = kb.check()
        assert report["ok"], report["problems"]
    finally:
        kb.close()


_GRAPH_THEN_MODEL = """
import sys, numpy as np, hybridkb
from hybridkb import HashingEmbedder
from hybridkb.embedding import get_embedder
kb = hybridkb.open(sys.argv[1], embedder=HashingEmbedder(64), vector_ann="on")
m = np.random.default_rng(5).standard_normal((300, 64)).astype(np.float32)
kb.add_many([{"id": f"v{i}", "text": f"item {i}", "vector": m[i]} for i in range(len(m))])
assert kb.search("item 3", mode="vector").hits  # opens the usearch graph
vec = get_embedder("minilm").embed_query("where do we keep the data?")  # loads onnxruntime
print("embedded", len(vec), flush=True)
"""


def test_the_model_loads_after_a_graph_was_searched(tmp_path: Path) -> None:
    """usearch loaded before onnxruntime crashed the process (SIGSEGV in libstdc++) when the
    default embedder then loaded its model: the graph is only ever opened after it."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _GRAPH_THEN_MODEL, str(tmp_path / "kb.db")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "embedded 384" in proc.stdout


def published_generation(kb: KnowledgeBase) -> str | None:
    row = kb.backend._read("SELECT generation FROM derived_indexes WHERE name = 'vectors'")
    return row[0][0] if row else None


def test_a_bulk_load_returns_with_its_vector_base_built(db: Path) -> None:
    kb = open_kb(db)
    m = fill(kb, 300)
    first = published_generation(kb)
    assert first is not None  # built by add_many itself, before any search
    builds = kb.backend._vectors.builds
    kb.add("one more item", id="late", vector=unit_rows(1, 9)[0])  # a small write: the delta holds it
    assert published_generation(kb) == first and kb.backend._vectors.builds == builds
    hits = kb.search("item", mode="vector", limit=5).hits
    q = np.asarray(kb.embedder.embed_query("item"), dtype=np.float32).reshape(-1)  # type: ignore[union-attr]
    want = np.argsort(-(m @ q))[:5]
    assert [h.id for h in hits if h.id != "late"][:4] == [f"v{i}" for i in want][:4]
    kb.close()


def test_the_vector_count_read_from_indexes_is_the_count_of_items_with_a_vector(db: Path) -> None:
    """vector_count (the size a build expects) counts from two indexes, not a scan of the
    rows: it must agree with the plain count as items are embedded, deferred, edited."""
    kb = open_kb(db)
    try:
        fill(kb, 30)
        kb.add_many([{"id": f"d{i}", "text": f"deferred {i}"} for i in range(7)], embed="defer")
        kb.upsert("item 3 edited, vector pending", id="v3", embed="defer")
        kb.delete("v4")
        plain = kb.backend._conn.execute(
            "SELECT count(*) FROM items WHERE embedded_hash IS NOT NULL").fetchone()[0]
        assert kb.backend._changes.vector_count() == plain == 28
        kb.reembed()
        plain = kb.backend._conn.execute(
            "SELECT count(*) FROM items WHERE embedded_hash IS NOT NULL").fetchone()[0]
        assert kb.backend._changes.vector_count() == plain == 36
    finally:
        kb.close()
