"""The eval harness: BEIR loading, metrics (cross-checked with pytrec_eval), the runner, the CLI.

Runs on small slices of the shared dev sets, built in a temp dir, with the
deterministic hashing embedder; one test uses the real model on a tiny slice.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from hybridkb import HashingEmbedder
from hybridkb.cli import cli
from hybridkb.errors import InvalidInputError
from hybridkb.evaluation import EmbeddingCache, EvalOptions, evaluate, format_table, load, metrics, plan_runs
from hybridkb.evaluation.runner import parse_pairs, split_values
from hybridkb.fusion import DEFAULT_FUSION, DEFAULT_WEIGHTS

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
needs_data = pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="shared dev data not found")

Rows = list[dict[str, Any]]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _read_qrels(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text("utf-8").splitlines()[1:] if line.strip()]


def _write_dataset(folder: Path, corpus: Rows, queries: Rows, qrels: list[list[str]],
                   split: str = "test") -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), "utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), "utf-8")
    lines = ["query-id\tcorpus-id\tscore"] + ["\t".join(r) for r in qrels]
    (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", "utf-8")
    return folder


def _slice(source: Path, folder: Path, n_queries: int, n_others: int) -> Path:
    """The first n judged queries, their relevant docs and n_others other docs."""
    rows = _read_qrels(source / "qrels" / "test.tsv")
    qids = list(dict.fromkeys(r[0] for r in rows))[:n_queries]
    rows = [r for r in rows if r[0] in qids]
    relevant = {r[1] for r in rows}
    corpus = _read_jsonl(source / "corpus.jsonl.gz")
    others = [d for d in corpus if d["_id"] not in relevant][:n_others]
    docs = [d for d in corpus if d["_id"] in relevant] + others
    queries = [q for q in _read_jsonl(source / "queries.jsonl") if q["_id"] in set(qids)]
    return _write_dataset(folder, docs, queries, rows)


@pytest.fixture(scope="module")
def scifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _slice(DATA / "scifact", tmp_path_factory.mktemp("scifact", numbered=False), 30, 300)


@pytest.fixture(scope="module")
def nfcorpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _slice(DATA / "nfcorpus", tmp_path_factory.mktemp("nfcorpus", numbered=False), 12, 150)


@pytest.fixture(scope="module")
def locomo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two whole conversations and the first 12 judged questions of each."""
    src = DATA / "locomo-dev"
    convs = ("conv-26", "conv-30")
    corpus = [d for d in _read_jsonl(src / "corpus.jsonl.gz") if d["metadata"]["conversation"] in convs]
    rows = [r for r in _read_qrels(src / "qrels" / "test.tsv") if r[0].split(":")[0] in convs]
    qids = [q for c in convs for q in list(dict.fromkeys(r[0] for r in rows if r[0].startswith(c)))[:12]]
    queries = [q for q in _read_jsonl(src / "queries.jsonl") if q["_id"] in set(qids)]
    return _write_dataset(tmp_path_factory.mktemp("locomo-dev", numbered=False), corpus, queries,
                          [r for r in rows if r[0] in qids])


@pytest.fixture()
def cache(tmp_path: Path) -> EmbeddingCache:
    return EmbeddingCache(tmp_path / "cache")


EMBEDDER = HashingEmbedder(128)


# -- metrics -------------------------------------------------------------------------------------

def test_metrics_by_hand() -> None:
    judged = {"a": 2, "b": 1, "c": 0, "z": 1}  # z is never retrieved
    ranked = ["c", "a", "x", "b"]
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    ideal = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert metrics.ndcg_at_k(ranked, judged, 10) == pytest.approx(dcg / ideal)
    assert metrics.ndcg_at_k(ranked, judged, 1) == 0.0
    assert metrics.recall_at_k(ranked, judged, 100) == pytest.approx(2 / 3)
    assert metrics.recall_at_k(ranked, judged, 2) == pytest.approx(1 / 3)
    assert metrics.mrr_at_k(ranked, judged, 10) == 0.5
    assert metrics.mrr_at_k(ranked, judged, 1) == 0.0
    # a query with no hits counts as 0; one with no relevant doc is skipped
    scores = metrics.per_query({"q1": ranked}, {"q1": judged, "q2": {"a": 1}, "q3": {"a": 0}})
    assert set(scores) == {"q1", "q2"} and scores["q2"] == {"ndcg@10": 0.0, "recall@100": 0.0,
                                                            "mrr@10": 0.0}
    assert metrics.evaluate({}, {}) == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


@needs_data
@pytest.mark.parametrize("name", ["scifact", "nfcorpus"])
@pytest.mark.parametrize("mode", ["fts", "hybrid"])
def test_metrics_match_pytrec_eval(name: str, mode: str, request: pytest.FixtureRequest,
                                   cache: EmbeddingCache) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    folder: Path = request.getfixturevalue(name)
    options = EvalOptions(modes=[mode], fusions=["dbsf"], default_row=False, keep_runs=True)
    report = evaluate(folder, EMBEDDER, options, cache=cache)
    row = report.rows[0]
    assert row.run is not None
    qrels = load(folder).qrels
    if name == "nfcorpus":
        assert any(rel == 2 for judged in qrels.values() for rel in judged.values())  # graded

    def trec_run(cut: int | None) -> dict[str, dict[str, float]]:
        return {q: {d: float(len(ids) - i) for i, d in enumerate(ids[:cut])}
                for q, ids in row.run.items() if ids}  # type: ignore[union-attr]

    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100"}).evaluate(trec_run(None))
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(trec_run(10))
    ours = metrics.per_query(row.run, qrels)
    assert set(full) <= set(ours) and len(full) >= len(ours) - 2
    for qid, mine in ours.items():
        theirs = (full[qid]["ndcg_cut_10"], full[qid]["recall_100"], rr[qid]["recip_rank"]) \
            if qid in full else (0.0, 0.0, 0.0)
        assert mine["ndcg@10"] == pytest.approx(theirs[0], abs=1e-6)
        assert mine["recall@100"] == pytest.approx(theirs[1], abs=1e-6)
        assert mine["mrr@10"] == pytest.approx(theirs[2], abs=1e-6)
    n = len(ours)
    mean_ndcg = sum(full[q]["ndcg_cut_10"] for q in full) / n
    assert row.scores["ndcg@10"] == pytest.approx(mean_ndcg, abs=1e-6)
    assert row.scores["mrr@10"] == pytest.approx(sum(rr[q]["recip_rank"] for q in rr) / n, abs=1e-6)
    assert 0.0 < row.scores["ndcg@10"] <= 1.0


# -- loading -------------------------------------------------------------------------------------

def test_load_beir_layout(tmp_path: Path) -> None:
    corpus: Rows = [{"_id": "d1", "title": "T", "text": "one", "metadata": {"k": 1}},
              {"_id": "d2", "title": "only a title", "text": ""},
              {"_id": "d3", "title": "", "text": ""}]
    queries: Rows = [{"_id": "q1", "text": "one"}, {"_id": "q2", "text": "two"},
               {"_id": "q3", "text": "three"}]
    folder = _write_dataset(tmp_path / "ds", corpus, queries,
                            [["q2", "d2", "2"], ["q1", "d1", "1"], ["q3", "d1", "0"], ["q9", "d1", "1"]])
    with gzip.open(folder / "corpus.jsonl.gz", "wb") as handle:  # the .jsonl wins over .gz
        handle.write(b"not json\n")
    data = load(folder)
    assert [q.id for q in data.queries] == ["q2", "q1"]  # qrels order; q3 has no relevant doc
    assert data.skipped_queries == 2 and data.qrels == {"q2": {"d2": 2}, "q1": {"d1": 1}}
    assert [(d.id, d.title, d.text) for d in data.corpus] == [("d1", "T", "one"),
                                                               ("d2", None, "only a title")]
    assert data.skipped_docs == 1 and data.corpus[0].metadata == {"k": 1}
    assert data.corpus[0].embedding_text == "T one"
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(InvalidInputError, match=r"corpus\.jsonl\.gz:1"):
        load(folder)
    with pytest.raises(InvalidInputError, match="no relevance judgments"):
        load(tmp_path / "ds", split="dev")


# -- the runner ----------------------------------------------------------------------------------

def test_plan_runs_defaults_and_options() -> None:
    specs = plan_runs(EvalOptions())
    assert [(s.mode, s.fusion) for s in specs] == [
        ("fts", None), ("vector", None), ("hybrid", "calibrated"), ("hybrid", "rrf"),
        ("hybrid", "convex"), ("hybrid", "dbsf"), ("hybrid", DEFAULT_FUSION)]
    assert [s.default for s in specs] == [False] * 6 + [True]
    assert specs[-1].weights == DEFAULT_WEIGHTS
    sweep = plan_runs(EvalOptions(modes=["hybrid"], fusions=["rrf", "dbsf"], weights=[(1, 1), (1, .5)],
                                  rrf_ks=[60, 20], bm25_weights=[None, (2, 1)], default_row=False))
    assert len(sweep) == 2 * (2 * 2 + 2)
    assert split_values(("fts,vector", " hybrid ")) == ["fts", "vector", "hybrid"]
    assert parse_pairs(("1,1; 1,0.5", "2,1"), "--weights") == [(1, 1), (1, .5), (2, 1)]
    with pytest.raises(InvalidInputError, match="two numbers"):
        parse_pairs(("1,2,3",), "--weights")
    with pytest.raises(InvalidInputError, match="unknown fusion"):
        plan_runs(EvalOptions(fusions=["max"]))


@needs_data
def test_runner_report_and_embedding_cache(scifact: Path, cache: EmbeddingCache) -> None:
    options = EvalOptions(max_queries=10, fusions=["rrf"], rrf_ks=[60, 20],
                          bm25_weights=[None, (2.0, 1.0)])
    first = evaluate(scifact, EMBEDDER, options, cache=cache)
    assert (first.corpus_embeddings_cached, first.query_embeddings_cached) == (False, False)
    assert len(list(cache.root.glob("*/*.npy"))) == 2
    second = evaluate(scifact, EMBEDDER, options, cache=cache)
    assert (second.corpus_embeddings_cached, second.query_embeddings_cached) == (True, True)
    assert [r.scores for r in first.rows] == [r.scores for r in second.rows]
    assert first.n_queries == 10 and first.n_docs > 300
    keys = [(r.spec.mode, r.spec.fusion, r.spec.rrf_k, r.spec.bm25_weights) for r in first.rows]
    assert ("fts", None, None, (2.0, 1.0)) in keys and ("hybrid", "rrf", 20, None) in keys
    fts = next(r for r in first.rows if r.spec.mode == "fts")
    assert fts.scores["ndcg@10"] > 0.5 and fts.p95_ms >= fts.p50_ms > 0 and fts.qps > 0
    table = format_table(first)
    assert "nDCG@10" in table and "hybrid*" in table
    # a changed text is a cache miss, not a stale read
    docs = _read_jsonl(scifact / "corpus.jsonl")
    docs[0]["text"] += " changed"
    changed = _write_dataset(scifact.parent / "changed", docs, _read_jsonl(scifact / "queries.jsonl"),
                             _read_qrels(scifact / "qrels" / "test.tsv"))
    third = evaluate(changed, EMBEDDER, EvalOptions(modes=["vector"], max_queries=10), cache=cache)
    assert third.corpus_embeddings_cached is False and third.query_embeddings_cached is True


@needs_data
def test_scope_by_keeps_each_query_in_its_conversation(locomo: Path) -> None:
    options = EvalOptions(modes=["fts", "vector", "hybrid"], fusions=["rrf"], default_row=False,
                          keep_runs=True)
    scoped = evaluate(locomo, EMBEDDER, replace(options, scope_by="conversation"))
    loose = evaluate(locomo, EMBEDDER, options)
    assert scoped.scope_by == "conversation" and scoped.n_queries == 24
    for row in scoped.rows:
        assert row.run is not None and any(row.run.values())
        for qid, ids in row.run.items():
            assert all(d.split(":")[0] == qid.split(":")[0] for d in ids), (row.spec, qid)
    mixed = [d for row in loose.rows for q, ids in (row.run or {}).items() for d in ids
             if d.split(":")[0] != q.split(":")[0]]
    assert mixed  # without the scope, the other conversation's turns come back
    with pytest.raises(InvalidInputError, match=r"no metadata\.speaker"):
        evaluate(locomo, EMBEDDER, EvalOptions(modes=["fts"], scope_by="speaker"))


def test_ignore_identical_ids(tmp_path: Path) -> None:
    """ArguAna-style: each query is itself a corpus document, which BEIR drops from its hits."""
    texts = ["solar panels cut power bills", "wind farms cut power bills too",
             "nuclear plants run all day", "coal is cheap but dirty", "hydro needs rivers"]
    corpus = [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(texts)]
    queries = [{"_id": "d0", "text": texts[0]}, {"_id": "d2", "text": texts[2]}]
    folder = _write_dataset(tmp_path / "arg", corpus, queries, [["d0", "d1", "1"], ["d2", "d3", "1"]])
    base = EvalOptions(modes=["fts"], keep_runs=True)
    kept = evaluate(folder, None, base).rows[0]
    dropped = evaluate(folder, None, replace(base, ignore_identical_ids=True)).rows[0]
    assert kept.run is not None and dropped.run is not None
    assert kept.run["d0"][0] == "d0" and "d0" not in dropped.run["d0"]
    assert "d2" not in dropped.run["d2"]
    assert dropped.scores["mrr@10"] > kept.scores["mrr@10"]


@needs_data
def test_fresh_store_target(scifact: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "kb.db")
    options = EvalOptions(modes=["fts"], max_queries=3, db=db)
    assert evaluate(scifact, None, options).rows[0].scores["ndcg@10"] > 0
    assert Path(db).is_file()
    with pytest.raises(InvalidInputError, match="fresh store"):
        evaluate(scifact, None, options)
    with pytest.raises(InvalidInputError, match="need an embedder"):
        evaluate(scifact, None, EvalOptions(modes=["vector"]))


# -- the CLI -------------------------------------------------------------------------------------

@needs_data
def test_cli_json_shape(scifact: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli, ["--embedder", "hashing-64", "eval", "--dataset", str(scifact), "--max-queries", "8",
              "--json", "--fusion", "rrf,dbsf", "--weights", "1,1", "--weights", "1,0.5",
              "--output", str(out_file)],
        env={"HYBRIDKB_CACHE": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert json.loads(out_file.read_text("utf-8")) == data
    assert data["dataset"] == "scifact" and data["split"] == "test" and data["queries"] == 8
    assert isinstance(data["index_seconds"], float)
    rows = data["results"]
    assert [(r["mode"], r["fusion"], r["weights"]) for r in rows] == [
        ("fts", None, None), ("vector", None, None),
        ("hybrid", "rrf", [1.0, 1.0]), ("hybrid", "rrf", [1.0, 0.5]),
        ("hybrid", "dbsf", [1.0, 1.0]), ("hybrid", "dbsf", [1.0, 0.5]),
        ("hybrid", DEFAULT_FUSION, list(DEFAULT_WEIGHTS))]
    assert [r["default"] for r in rows] == [False] * 6 + [True]
    for row in rows:
        assert {"ndcg@10", "recall@100", "mrr@10", "qps", "p50_ms", "p95_ms"} <= set(row)
        assert 0.0 <= row["ndcg@10"] <= 1.0
        assert ("min_score" in row) == row["default"]  # the default row's first hits
    first = rows[-1]["min_score"]
    assert first["relevant"] + first["irrelevant"] == 8 and set(first["curve"]) >= {"0.2", "0.5"}
    table = CliRunner().invoke(cli, ["--no-embedder", "eval", "--dataset", str(scifact),
                                     "--mode", "fts", "--max-queries", "3"])
    assert table.exit_code == 0 and "nDCG@10" in table.stdout
    bad = CliRunner().invoke(cli, ["--no-embedder", "eval", "--dataset", str(scifact)])
    assert bad.exit_code == 1 and "need an embedder" in bad.stderr


# -- the real model, once, on a tiny slice -------------------------------------------------------

@needs_data
@pytest.mark.model
def test_real_model_tiny_slice(tmp_path: Path, cache: EmbeddingCache) -> None:
    from hybridkb import MiniLMEmbedder

    folder = _slice(DATA / "scifact", tmp_path / "tiny", 4, 20)
    model = MiniLMEmbedder()
    report = evaluate(folder, model, EvalOptions(modes=["vector"], default_row=False, keep_runs=True),
                      cache=cache)
    assert report.rows[0].scores["ndcg@10"] > 0.3
    data = load(folder)
    entry = next(cache.root.glob("*/queries-*.npy"))
    cached = np.load(entry)
    assert np.allclose(cached[0], model.embed_query(data.queries[0].text), atol=1e-6)


def test_identifier_evaluation_over_an_installed_package() -> None:
    """The --identifiers harness: names the source defines, judged by the chunks holding them
    (the defining chunk graded 2), run here by full text only (no model)."""
    from hybridkb.evaluation.identifiers import evaluate_identifiers, format_identifiers, judgments

    report = evaluate_identifiers(None, EvalOptions(modes=["fts"], default_row=False),
                                  packages=("pathspec",))
    assert report.packages["pathspec"] and report.chunks > 20 and report.queries > 10
    (row,) = report.rows
    assert row.row.scores["ndcg@10"] > 0.5 and 0.5 < row.contains_share <= 1.0
    assert "identifiers:" in format_identifiers(report)
    assert report.to_dict()["results"][0]["top10_contains"] == round(row.contains_share, 6)

    class Chunk:
        def __init__(self, id: str, text: str, path: str, lines: tuple[int, int]) -> None:
            self.id, self.text, self.corpus = id, text, "c"
            self.metadata = {"path": path, "start_line": lines[0], "end_line": lines[1]}

    chunks = [Chunk("a", "def load_all(x):\n    return x", "m.py", (1, 2)),
              Chunk("b", "y = load_all(1)  # not load_all_items", "m.py", (3, 3)),
              Chunk("c", "load_allx = 2", "n.py", (1, 1))]
    assert judgments(chunks, {"load_all": [("c", "m.py", 1)], "gone": [("c", "m.py", 9)]}) == {
        "load_all": {"a": 2, "b": 1}}
