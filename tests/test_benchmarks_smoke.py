"""The speed benchmark's code path on a tiny store: it runs and its JSON has the
expected shape. Speed itself is never asserted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

pytest.importorskip("bm25s")

from benchmarks import report  # noqa: E402
from benchmarks.__main__ import main  # noqa: E402

WORDS = ("cell protein cancer diet vitamin gene tumor blood insulin heart risk study "
         "patients trial dose effect brain liver mice cholesterol").split()


def _dataset(folder: Path, n_docs: int = 30, n_queries: int = 25) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n_docs):
            text = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(40))
            f.write(json.dumps({"_id": f"d{i}", "title": f"Doc {i}", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for q in range(n_queries):
            text = " ".join(WORDS[(q * 5 + j) % len(WORDS)] for j in range(4)) + f" {q}"
            f.write(json.dumps({"_id": f"q{q}", "text": text}) + "\n")
    rows = "".join(f"q{q}\td{q % n_docs}\t1\n" for q in range(n_queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return folder


def test_benchmark_runs_and_writes_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _dataset(tmp_path / "tiny")
    out = tmp_path / "out"
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Indexing a source tree\n\nkept as it is\n", encoding="utf-8")
    code = main(["--sizes", "300", "--queries", "20", "--warmup", "2", "--embed-items", "10",
                 "--embedder", "hashing-32", "--data", str(data), "--out", str(out),
                 "--no-cache", "--doc", str(doc), "--no-peers"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| FTS |" in printed

    (json_file,) = out.glob("speed-*.json")
    results = json.loads(json_file.read_text())
    assert set(results) >= {"machine", "options", "data", "sizes", "command", "started"}
    assert results["machine"]["cores"] >= 1
    (size,) = results["sizes"]
    assert size["items"] == 300
    lat = size["latency"]
    assert lat["queries"] == 20
    for mode in ("fts", "vector", "hybrid"):
        for part in ("without_embedding", "with_embedding"):
            fig = lat[part][mode]
            assert fig["n"] == 20
            assert fig["p50_ms"] <= fig["p95_ms"] <= fig["p99_ms"]
            assert set(fig["ratio"]) >= {"p50", "p95", "p99"}
    assert {"bm25s", "numpy", "numpy+bm25s", "fts5", "tantivy", "usearch"} <= set(lat["baselines"])
    assert lat["vector_recall@10"] >= 0.9  # a flat base at this size: exact
    assert lat["baselines"]["fts5"]["n"] == lat["baselines"]["tantivy"]["n"] == 20
    assert lat["embed_query"]["n"] == 40
    assert size["ingest"]["without_embedding"]["items"] == 300
    assert size["ingest"]["with_embedding"]["items"] == 10
    assert size["size"]["db_plus_wal_bytes"] > 0
    assert size["serve"]["peak_rss_mb"] > 0
    assert size["cold"]["open_first_hybrid_ms"] > 0 and size["cold"]["baseline_ms"] > 0
    assert size["after_write"]["rounds"] == 40 and size["after_write"]["hybrid_p50_ms"] > 0
    assert size["after_write"]["baseline_p50_ms"] > 0
    assert size["ingest"]["without_embedding"]["searchable_items_per_s"] > 0
    ing = size["ingest"]["without_embedding"]
    # 300 items: a flat base, nothing due in the background, so the timed build is a second one
    assert (ing["vector_base_build"], ing["vector_base_graph"]) == ("again", False)
    assert ing["vector_base_build_s"] > 0 and "graph_build_s" not in ing
    assert "| vector base built again after the load (a second full build" in report.markdown(results)
    assert size["vec0"]["recall_vs_numpy"] >= 0.9
    assert set(size["stages"]["hybrid"]["mean_ms_by_stage"]) >= {"fts", "vector", "fetch", "other"}
    assert size["rss"]["process_peak_mb"] > 0
    assert set(size["whatif"]["hybrid"]) >= {"as is", "fast dedup", "in-memory BM25", "dedup off"}
    assert size["whatif"]["fast_dedup_results_differ_on"] == 0
    assert "rescore 200" in size["whatif"]["vector_binary_prefilter"]
    assert not list((out / "stores").glob("*.db")), "stores are removed unless --keep-stores"

    text = doc.read_text(encoding="utf-8")
    assert "## Indexing a source tree\n\nkept as it is" in text
    assert text.count(report.BEGIN) == 1 and "## Speed" in text
    report.update_doc(doc, results)  # a second run replaces the table, adds nothing else
    assert doc.read_text(encoding="utf-8") == text


def test_the_timed_vector_build_is_named_for_what_was_timed() -> None:
    """The row says whether the background build was waited for or the base built a second
    time (add_many builds one before returning); older JSON's `graph_build_s` still renders."""
    row = {"vector_base_build_s": 14.6, "vector_base_build_vectors_per_s": 68_514.1}
    again = report.vector_build_row({**row, "vector_base_build": "again", "vector_base_graph": False})
    assert again.startswith("| vector base built again after the load (a second full build")
    assert "14.6 s (68,514 vectors/s)" in again and "graph" not in again
    waited = report.vector_build_row({**row, "vector_base_build": "background", "vector_base_graph": True})
    assert waited.startswith("| vector base build in the background after the load, with its graph, waited")
    old = report.vector_build_row({"graph_build_s": 2.009, "graph_build_vectors_per_s": 49_785.6})
    assert old.startswith("| vector base build timed after the load (older JSON") and "2.0 s (49,786" in old
    assert "background in use" not in again + waited + old


def test_ingest_benchmark_runs_and_writes_its_table(tmp_path: Path) -> None:
    from benchmarks import ingest_speed

    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    for i in range(6):
        (tree / "pkg" / f"m{i}.py").write_text(f"def f{i}(x):\n    '''the module {i}'''\n    return x\n")
    (tree / "README.md").write_text("# Tree\n\nthe tree of modules\n")
    doc = tmp_path / "bench.md"
    doc.write_text("# Benchmarks\n")
    assert ingest_speed.main(["--tree", str(tree), "--embedder", "hashing-64", "--out", str(tmp_path / "out"),
                              "--doc", str(doc), "--compare", "5"]) == 0
    [written] = (tmp_path / "out").glob("ingest-*.json")
    [row] = json.loads(written.read_text())["rows"]
    assert (row["files"], row["chunks"], row["paired"]["chunks"]) == (7, 7, 5)
    assert row["first_searchable_s"] <= row["fully_embedded_s"]
    text = doc.read_text()
    assert "## Indexing a source tree" in text and f"| {tree} | 7 | 7 |" in text


def test_the_peers_run_beside_the_store_in_one_loop(tmp_path: Path) -> None:
    """LanceDB and Chroma (the `bench` extra) answer the same queries as the store, each
    with its recall against the exact answer; skipped where neither is installed."""
    import numpy as np

    import hybridkb
    from benchmarks import peers
    from benchmarks.baselines import NumpyExact
    from benchmarks.run import stored_matrix
    from hybridkb import HashingEmbedder
    from hybridkb.model import Filters, now_ts
    from hybridkb.storage.contract import SearchArea

    if not peers.available():
        pytest.skip("neither lancedb nor chromadb is installed (pip install 'hybridkb[bench]')")
    model = HashingEmbedder(32)
    texts = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12)) + f" n{i}"
             for i in range(300)]
    rng = np.random.default_rng(5)  # distinct directions: no ties in the exact top 10
    vectors = rng.standard_normal((300, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = [f"{WORDS[q]} {WORDS[(q * 3) % len(WORDS)]}" for q in range(12)]
    query_vectors = vectors[rng.choice(300, 12, replace=False)] + 0.1 * rng.standard_normal((12, 32))
    query_vectors = (query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)).astype(np.float32)
    area = SearchArea(None, Filters(), now_ts())
    with hybridkb.open(str(tmp_path / "kb.db"), embedder=model, sample_queries=False) as kb:
        kb.add_many([{"id": f"d{i}", "text": t, "vector": v} for i, (t, v) in
                     enumerate(zip(texts, vectors, strict=True))])
        truth = [NumpyExact(vectors).search(q, 10) for q in query_vectors]
        stored = NumpyExact(stored_matrix(vectors))
        out = peers.measure(tmp_path, kb, texts, vectors, queries, query_vectors, truth,
                            lambda q: [int(r) - 1 for r, _ in kb.backend.vector_search(q, area, 10)],
                            limit=10, warmup=2, hybridkb_ingest_s=1.0, hybridkb_first_fts_s=0.01,
                            hybridkb_bytes=1,
                            stored_truth=[stored.search(q, 10) for q in query_vectors],
                            log=lambda _line: None)
    assert out["queries"] == 12 and out["hybridkb"]["hybrid"]["n"] == 12
    assert out["hybridkb"]["vector_recall@10"] >= 0.99  # rowid r is item r - 1: exact scans
    assert out["hybridkb"]["vector_recall@10_of_stored"] >= 0.99
    own = [stored.search(q, 10) for q in query_vectors]
    ceiling = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(own, truth, strict=True)])
    assert out["hybridkb"]["vector_recall@10_ceiling"] == round(float(ceiling), 4) > 0.9
    for name in peers.available():
        fig = out[name]
        assert fig["vector"]["n"] == 12 and fig["disk_bytes"] > 0 and fig["items_per_s"] > 0
        assert fig["vector_recall@10"] >= 0.9  # LanceDB below IVF_PQ's size: exact answers
        assert not (tmp_path / f"peer-{name}-300").exists()  # removed after the run
    if "lancedb" in out:
        assert out["lancedb"]["fts"]["n"] == out["lancedb"]["hybrid"]["n"] == 12
    table = "\n".join(report.peers_table({"items": 300, "peers": out}))
    assert "| vector recall@10 (vs exact over the given float32 vectors) |" in table
    assert "| vector recall@10 (vs exact over the values the engine stores) | 1.000 |" in table


def test_the_compact_vectors_benchmark_ranks_each_kind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import compact_vectors

    data = _dataset(tmp_path / "tiny", n_docs=40, n_queries=20)
    monkeypatch.setenv("HYBRIDKB_CACHE", str(tmp_path / "cache"))
    assert compact_vectors.main(["--embedder", "hashing-32", "--dataset", str(data)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    out = json.loads(line)
    assert out["dataset"] == "tiny" and out["queries"] == 20
    assert all(0 < out[k] <= 1 for k in ("float32", "float16", "stored"))


def test_the_footprint_benchmark_sees_no_superseded_generation(tmp_path: Path) -> None:
    from benchmarks import footprint

    data = _dataset(tmp_path / "tiny", n_docs=40, n_queries=70)
    out = footprint.measure(300, tmp_path / "stores", "hashing-32", datasets=[data], cache=False)
    assert out["optimize"]["measured_on_asked"] == 0  # a flat base below 30k: nothing to measure
    assert out["loaded"]["total"] > 0
    assert out["reopened_and_searched"]["vector_index"] == out["loaded"]["vector_index"]
    assert [n for n in out["vector_folder"] if n.startswith("g")] and len(out["vector_folder"]) == 2
    assert not list((tmp_path / "stores").glob("footprint-*"))
