"""The calibration module (pure) and calibrated search on a small code corpus, both backends."""

from __future__ import annotations

import math

import pytest

import hybridkb
from hybridkb import calibration
from hybridkb.calibration import Background, Evidence
from hybridkb.evaluation.runner import credit


def test_coverage_counts_whole_terms_with_a_suffix_fold() -> None:
    assert calibration.coverage([("vitamin",), ("rickets",)], "Vitamins prevent rickets.") == 1.0
    assert calibration.coverage([("vitamin",), ("rickets",)], "Vitamin D and bones") == 0.5
    # an identifier is a word sequence: only the whole run counts
    assert calibration.coverage([("raise", "for", "status")], "def raise_for_status(self):") == 1.0
    assert calibration.coverage([("raise", "for", "status")], "status: raise it for me") == 0.0
    assert calibration.coverage([], "anything") == 0.0


def test_tokens_split_as_the_text_query_splits() -> None:
    assert calibration.tokens("Hello raise_for_status() x2") == ["hello", "raise", "for", "status", "x2"]
    assert calibration.tokens("Grüße, Zürich") == ["grüße", "zürich"]


def test_relevance_is_a_probability_that_grows_with_every_kind_of_evidence() -> None:
    base = Evidence(coverage=0.2, bm25=0.5, vector=0.5, cosine_z=1.0)
    r = calibration.relevance(base, "hybrid")
    assert 0.0 < r < 1.0
    for stronger in (Evidence(0.8, 0.5, 0.5, 1.0), Evidence(0.2, 0.9, 0.5, 1.0),
                     Evidence(0.2, 0.5, 0.9, 1.0), Evidence(0.2, 0.5, 0.5, 4.0)):
        assert calibration.relevance(stronger, "hybrid") > r
    assert calibration.relevance(Evidence(1.0, 0.9, 0.0, 0.0), "fts") > calibration.relevance(
        Evidence(0.0, 0.9, 0.0, 0.0), "fts")
    assert not math.isnan(calibration.relevance(Evidence(1e9, 1e9, 1e9, 1e9), "hybrid"))
    assert calibration.relevance(Evidence(-1e9, -1e9, -1e9, -1e9), "hybrid") >= 0.0


def test_an_exact_match_outweighs_a_strong_vector_neighbour() -> None:
    exact = Evidence(coverage=1.0, bm25=0.9, vector=0.0, cosine_z=0.5)
    neighbour = Evidence(coverage=0.0, bm25=0.0, vector=1.0, cosine_z=3.0)
    assert calibration.relevance(exact, "hybrid") > calibration.relevance(neighbour, "hybrid")


def test_a_vector_list_top_at_the_background_is_no_evidence() -> None:
    at_noise = Evidence(coverage=0.0, bm25=0.0, vector=1.2, cosine_z=calibration.GATE[0])
    unlisted = Evidence(coverage=0.0, bm25=0.0, vector=0.0, cosine_z=calibration.GATE[0])
    assert calibration.relevance(at_noise, "hybrid") == calibration.relevance(unlisted, "hybrid")
    assert at_noise.counted_vector == 0.0
    assert Evidence(vector=0.8, cosine_z=calibration.GATE[1]).counted_vector == 0.8
    half = (calibration.GATE[0] + calibration.GATE[1]) / 2
    assert Evidence(vector=0.8, cosine_z=half).counted_vector == pytest.approx(0.4)
    # cosine z is evidence of its own only above what noise reaches
    assert Evidence(cosine_z=calibration.Z_FLOOR - 0.5).z_above == 0.0
    assert Evidence(cosine_z=calibration.Z_FLOOR + 1.5).z_above == pytest.approx(1.5)
    # a document holding one of the query's words outranks it
    word = Evidence(coverage=0.25, bm25=0.3, vector=0.0, cosine_z=calibration.GATE[0] - 1)
    assert calibration.relevance(word, "hybrid") > calibration.relevance(at_noise, "hybrid")


def test_cosine_z_and_dbsf_bounds() -> None:
    assert calibration.cosine_z(0.4, Background(0.2, 0.05)) == pytest.approx(4.0)
    assert calibration.cosine_z(0.4, Background(0.2, 0.0)) == pytest.approx(10.0)  # floor 0.02
    assert calibration.cosine_z(0.4, None) == 0.0
    low, span = calibration.dbsf_bounds([1.0, 2.0, 3.0])
    assert calibration.scaled(2.0, (low, span)) == pytest.approx(0.5)
    assert calibration.scaled(5.0, (0.0, 0.0)) == 0.5


def test_confidence_levels() -> None:
    assert calibration.confidence(None) == "none"
    assert calibration.confidence(calibration.LOW - 0.01) == "none"
    assert calibration.confidence(calibration.LOW) == "low"
    assert calibration.confidence(calibration.HIGH) == "high"


def test_kind_of_search() -> None:
    assert calibration.kind_of(True, True) == "hybrid"
    assert calibration.kind_of(True, False) == "fts"
    assert calibration.kind_of(False, True) == "vector"
    assert set(calibration.COEFFICIENTS) == {"hybrid", "fts", "vector"}
    assert Evidence(coverage=1.0).full == 1.0 and Evidence(coverage=0.5).full == 0.0


def test_the_harness_credits_a_collapsed_hit_for_the_first_uncredited_relevant_id() -> None:
    judged = {"a": 1, "b": 1, "c": 1}
    # hit x stands for a and b: credited as a; the next hit with b is credited as b
    assert credit([["x", "a", "b"], ["y", "b"], ["z"]], judged) == ["a", "b", "z"]
    # its own id first when it is relevant; a second hit standing only for credited ids
    # keeps its id, and a repeat becomes a placeholder that matches nothing
    got = credit([["a", "b"], ["a2", "a"], ["a"]], judged)
    assert got[:2] == ["a", "a2"] and got[2] != "a" and got[2] not in judged
    assert credit([["b", "c"], ["q", "b", "c"]], judged) == ["b", "c"]


def test_the_min_score_curve_of_first_hits() -> None:
    from hybridkb.evaluation.metrics import min_score_curve

    got = min_score_curve([(0.9, True), (0.3, True), (0.05, False), (0.6, False)], (0.2, 0.5))
    assert got["relevant"] == 2 and got["irrelevant"] == 2
    assert got["curve"] == {"0.2": {"kept": 1.0, "dropped": 0.5},
                            "0.5": {"kept": 0.5, "dropped": 0.5}}
    assert min_score_curve([], (0.2,))["curve"] == {"0.2": {"kept": None, "dropped": None}}


CODE = {
    "http.py": (
        "def raise_for_status(response):\n"
        "    \"\"\"Raise HTTPError when the response status is 4xx or 5xx.\"\"\"\n"
        "    if response.status_code >= 400:\n"
        "        raise HTTPError(response.status_code)\n"),
    "client.py": (
        "def fetch(url):\n"
        "    response = send(url)\n"
        "    raise_for_status(response)\n"
        "    return response.json()\n"),
    "progress.py": (
        "class ProgressBar:\n"
        "    \"\"\"Draw a progress bar on the terminal while downloading a response.\"\"\"\n"
        "    def update(self, n):\n"
        "        self.done += n\n"),
    "errors.py": (
        "class HTTPError(Exception):\n"
        "    \"\"\"An error status code in a response from the server.\"\"\"\n"),
    "retry.py": (
        "def retry(request, attempts=3):\n"
        "    \"\"\"Send a request again when the server answers with an error status.\"\"\"\n"
        "    for _ in range(attempts):\n"
        "        response = request()\n"),
}


@pytest.mark.model
def test_a_definition_ranks_first_and_nonsense_scores_low(target: str, tmp_path) -> None:
    """Both backends, the real model: an identifier's defining chunk first, with a score that
    says so; nonsense and off-topic questions score below 0.2 and say nothing was found."""
    from hybridkb.ingest import index_folder

    folder = tmp_path / "src"
    folder.mkdir()
    for name, text in CODE.items():
        (folder / name).write_text(text, encoding="utf-8")
    kb = hybridkb.open(target, embedder=hybridkb.MiniLMEmbedder())
    try:
        index_folder(kb, folder, "code")
        found = kb.search("raise_for_status")
        assert found.hits[0].path == "http.py"
        assert found.hits[0].score >= calibration.HIGH and found.confidence == "high"
        assert {h.path for h in found.hits[:2]} == {"http.py", "client.py"}
        for nonsense in ("asdkjhqwe zzxq", "recipe for banana bread", "who won the world cup"):
            result = kb.search(nonsense)
            assert result.hits and result.hits[0].score < calibration.LOW, nonsense
            assert result.confidence == "none"
            assert any(n.startswith("no confident match") for n in result.notes)
            assert result.to_dict()["confidence"] == "none"
    finally:
        kb.close()


def test_scores_come_in_order_under_every_merge_and_fusion(kb) -> None:
    """A page is sorted by the score it shows: merge="rrf" printed 0.987, 0.907, 0.982."""
    kb.add_many([{"text": f"cache invalidation note {i}", "corpus": "big"} for i in range(30)])
    kb.add("cache invalidation in the code", corpus="code", id="c")
    kb.add("cache invalidation review, and more words about caching", corpus="reviews", id="r")
    for merge in ("relevance", "rrf"):
        for fusion in ("calibrated", "rrf", "dbsf"):
            result = kb.search("cache invalidation", merge=merge, fusion=fusion, limit=12)
            scores = [h.score for h in result.hits]
            assert scores == sorted(scores, reverse=True), (merge, fusion, scores)
            assert result.confidence in ("high", "low", "none")
            assert all(0.0 <= h.evidence["calibrated"] <= 1.0 for h in result.hits)


def test_an_embedder_that_cannot_embed_the_probes_keeps_no_background(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from hybridkb import HashingEmbedder
    from hybridkb.noise import META_KEY, PROBES

    class OwnQueriesOnly(HashingEmbedder):
        def embed_query(self, text: str):  # type: ignore[no-untyped-def]
            if text in PROBES:
                raise ValueError("not one of my queries")
            return super().embed_query(text)

    with hybridkb.open(str(tmp_path / "kb.db"), embedder=OwnQueriesOnly(32)) as kb:
        kb.add("the billing service runs migration_032 first", id="a")
        result = kb.search("migration_032 billing")
        assert result.ids[:1] == ["a"] and result.confidence in ("high", "low", "none")
        assert kb.backend.get_meta(META_KEY) is None  # a failure is never stored as a background
