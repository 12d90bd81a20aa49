"""The multi-corpus evaluation and the near-duplicate variant, on small slices of the dev
sets with the hashing embedder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluation import DATA, EMBEDDER, _slice, needs_data

from hybridkb.cli import cli
from hybridkb.errors import InvalidInputError
from hybridkb.evaluation import EvalOptions, evaluate, load, metrics
from hybridkb.evaluation.multi import EMPTY_CORPUS, NOTES_CORPUS, evaluate_multi, format_multi
from hybridkb.evaluation.neardup import with_near_duplicates
from hybridkb.evaluation.typos import MIN_LENGTH, with_query_typos
from hybridkb.textquery import STOPWORDS

pytestmark = needs_data


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("multi")
    return (_slice(DATA / "scifact", root / "scifact", 20, 150),
            _slice(DATA / "nfcorpus", root / "nfcorpus", 8, 100))


def test_every_corpus_beside_own_corpus(sets: tuple[Path, Path]) -> None:
    options = EvalOptions(modes=["hybrid"], fusions=["dbsf"], merges=("relevance", "rrf"),
                          keep_runs=True)
    report = evaluate_multi(sets, EMBEDDER, options)
    assert set(report.corpora) == {"beir-scifact", "beir-nfcorpus", NOTES_CORPUS, EMPTY_CORPUS}
    assert report.datasets["scifact"][1] == 20 and report.datasets["nfcorpus"][1] == 8
    rows = {(r.dataset, r.spec.merge, r.spec.default): r for r in report.rows}
    assert len(rows) == 8  # 2 sets x (dbsf row, default row) x 2 merges
    for name in ("scifact", "nfcorpus"):
        default = rows[(name, "relevance", True)]
        # own-corpus hits are the dataset's own ids, prefix removed; every-corpus runs can
        # hold other corpora's items, which keep their prefix and are never relevant
        own_ids = {d for ids in (default.own.run or {}).values() for d in ids}
        assert own_ids and not any(":" in d for d in own_ids)
        every_ids = {d for ids in (default.every.run or {}).values() for d in ids}
        assert any(d.startswith(("nfcorpus:", "scifact:", "note-", "scratch-")) for d in every_ids)
        # the distractors never come first; the other BEIR set (also biomedical) may compete
        assert not any(ids and ids[0].startswith(("note-", "scratch-"))
                       for ids in (default.every.run or {}).values())
        assert default.every.scores["ndcg@10"] >= default.own.scores["ndcg@10"] - 0.1
        # the distractor counts: queries where one outranks a hit containing a query word,
        # queries whose top 10 it enters
        n = report.datasets[name][1]
        assert default.distractor_above is not None and 0 <= default.distractor_above <= n
        assert default.distractor_top10 is not None and 0 <= default.distractor_top10 <= n
        assert default.to_dict()["distractor_above_match"] == default.distractor_above
        # rank interleaving puts another corpus's first hit second: it must lose more
        rrf = rows[(name, "rrf", True)]
        assert rrf.every.scores["ndcg@10"] < default.every.scores["ndcg@10"]
        assert rrf.own.scores == default.own.scores
        # condensed: the every-corpus ranking scored without other corpora's hits
        stripped = {q: [d for d in ids if ":" not in d and not d.startswith(("note-", "scratch-"))]
                    for q, ids in (default.every.run or {}).items()}
        assert stripped != default.every.run
        qrels = load(sets[0] if name == "scifact" else sets[1]).qrels
        assert default.condensed == metrics.evaluate(stripped, {q: qrels[q] for q in stripped})
        assert default.condensed["ndcg@10"] >= default.every.scores["ndcg@10"]
    table = format_multi(report)
    assert "every nDCG" in table and "rrf" in table and "scifact" in table
    assert "condensed" in table
    as_json = report.to_dict()["results"][0]
    assert 0 < as_json["condensed_ndcg@10"] <= 1


def test_multi_cli_json(sets: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "multi.json"
    result = CliRunner().invoke(cli, [
        "--db", str(tmp_path / "unused.db"), "--embedder", "hashing", "eval",
        "--dataset", str(sets[0]), "--dataset", str(sets[1]), "--mode", "fts", "--no-cache",
        "--no-distractors", "--output", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data == json.loads(out.read_text())
    assert set(data["corpora"]) == {"beir-scifact", "beir-nfcorpus"}
    row = data["results"][0]
    assert row["mode"] == "fts" and 0 < row["own_ndcg@10"] <= 1 and 0 < row["every_ndcg@10"] <= 1


def test_same_dataset_twice_is_refused(sets: tuple[Path, Path]) -> None:
    with pytest.raises(InvalidInputError):
        evaluate_multi([sets[0], sets[0]], None, EvalOptions(modes=["fts"]))


def test_near_duplicates_add_decoys_and_judged_siblings(sets: tuple[Path, Path]) -> None:
    data = load(sets[0])
    variant = with_near_duplicates(data)
    added = variant.corpus[len(data.corpus):]
    assert variant.generated == len(added) > 0
    relevant = {d for judged in data.qrels.values() for d, g in judged.items() if g > 0}
    assert len(added) == len(relevant)
    decoys = [d for d in added if d.id.endswith("~decoy")]
    siblings = [d for d in added if d.id.endswith("~sibling")]
    assert decoys and siblings and len(decoys) + len(siblings) == len(added)
    judged = {d for j in variant.qrels.values() for d in j}
    assert not any(d.id in judged for d in decoys) and all(d.id in judged for d in siblings)
    by_id = {d.id: d for d in data.corpus}
    for doc in added:
        original = by_id[doc.id[1:].rsplit("~", 1)[0]]
        a, b = original.text.split(), doc.text.split()
        assert len(a) == len(b) and 0 < sum(x != y for x, y in zip(a, b, strict=True)) <= max(
            2, round(0.04 * len(a)))
    assert with_near_duplicates(data).corpus == variant.corpus  # deterministic


def test_near_copies_win_about_half_of_the_ties_by_id() -> None:
    """Equal scores are ordered by id: copies that always sorted after their originals
    would flatter a retriever that ties them (BM25, where no query word was changed)."""
    data = load(DATA / "scifact")
    added = with_near_duplicates(data).corpus[len(data.corpus):]
    before = sum(doc.id < doc.id[1:].rsplit("~", 1)[0] for doc in added)
    assert 0.4 < before / len(added) < 0.6, (before, len(added))
    # and no copy is longer than its original once stopwords are dropped (PostgreSQL)
    by_id = {d.id: d for d in data.corpus}
    for doc in added:
        original = by_id[doc.id[1:].rsplit("~", 1)[0]].text.split()
        changed = [w for w, c in zip(original, doc.text.split(), strict=True) if w != c]
        assert changed and all(w.isalpha() and w.lower() not in STOPWORDS for w in changed)


def test_near_duplicate_option_in_the_runner(sets: tuple[Path, Path]) -> None:
    options = EvalOptions(modes=["fts"], near_duplicates=True, default_row=False)
    report = evaluate(sets[0], None, options)
    assert report.dataset == "scifact+neardup" and report.n_docs > 170


def test_query_typos_misspell_longer_words_and_keep_the_judgments(sets: tuple[Path, Path]) -> None:
    data = load(sets[0])
    variant = with_query_typos(data)
    assert variant.name == "scifact+typos"
    assert variant.corpus == data.corpus and variant.qrels == data.qrels
    changed = 0
    for before, after in zip(data.queries, variant.queries, strict=True):
        assert before.id == after.id
        a, b = before.text.split(" "), after.text.split(" ")
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            if x != y:
                changed += 1
                assert len(x) >= MIN_LENGTH and x.isalpha() and x[0] == y[0]
                assert abs(len(x) - len(y)) <= 1
        eligible = sum(len(w) >= MIN_LENGTH and w.isalpha() for w in a)
        assert eligible == 0 or before.text != after.text
    assert changed > len(data.queries)
    assert with_query_typos(data).queries == variant.queries  # deterministic


def test_query_typo_option_lowers_full_text(sets: tuple[Path, Path]) -> None:
    clean = evaluate(sets[0], None, EvalOptions(modes=["fts"], default_row=False))
    typed = evaluate(sets[0], None, EvalOptions(modes=["fts"], default_row=False, query_typos=True))
    assert typed.dataset == "scifact+typos"
    assert typed.rows[0].scores["ndcg@10"] < clean.rows[0].scores["ndcg@10"] - 0.05


def test_a_note_counts_above_a_match_only_when_it_holds_no_query_word() -> None:
    from hybridkb.evaluation.beir import Dataset, Document, Query
    from hybridkb.evaluation.multi import _Words

    data = Dataset("set", "test", Path("c"), Path("q"), [
        Document("a", None, "airport body scanners"), Document("b", None, "toner within days")],
        [Query("q1", "airport scanners"), Query("q2", "toner within")], {})
    words = _Words([(data, data.queries, None)], distractors=True)
    own = {"a", "b"}
    # note-2 (the printer) shares no word with "airport scanners": above "a", it counts
    assert words.counts({"q1": ["note-2", "a"]}, data.queries[:1], own, "set:") == (1, 1, 1)
    assert words.counts({"q1": ["a", "note-2"]}, data.queries[:1], own, "set:") == (0, 1, 0)
    # note-2 holds "toner" (and note-3 "within"): a word match like "b", not a distractor;
    # the third count (any note above a match) still shows it
    assert words.counts({"q2": ["note-2", "note-3", "b"]}, data.queries[1:], own, "set:") == (0, 1, 1)
