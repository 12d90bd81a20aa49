"""Pure logic: dedup, score policy, labels, filter parsing."""

from __future__ import annotations

import math
import random
import time

import pytest

from hybridkb import dedup
from hybridkb.dedup import collapse, jaccard, tokens
from hybridkb.errors import InvalidFilterError
from hybridkb.labels import source_label
from hybridkb.model import parse_filters
from hybridkb.scoring import DAY_S, ScorePolicy, apply


def test_identical_texts_collapse_best_ranked_survives() -> None:
    kept, absorbed = collapse([("a", "the same words here"), ("b", "The same words, here!"),
                               ("c", "something else entirely")])
    assert kept == ["a", "c"]
    assert absorbed == {"a": ["b"]}


def test_different_texts_stay() -> None:
    ranked = [(str(i), f"note {i} about topic {i * 7}") for i in range(20)]
    kept, absorbed = collapse(ranked)
    assert kept == [d for d, _ in ranked] and absorbed == {}


def test_empty_and_single_unchanged() -> None:
    assert collapse([]) == ([], {})
    assert collapse([("x", "only")]) == (["x"], {})


def test_near_duplicate_threshold() -> None:
    base = " ".join(f"w{i}" for i in range(20))
    near = base + " extra"            # 20/21 = 0.952
    far = " ".join(f"w{i}" for i in range(15)) + " a b c d e"  # 15/25 = 0.6
    kept, absorbed = collapse([("a", base), ("b", near), ("c", far)], threshold=0.9)
    assert kept == ["a", "c"] and absorbed == {"a": ["b"]}
    assert jaccard(tokens(base), tokens(near)) == pytest.approx(20 / 21)
    kept, _ = collapse([("a", base), ("b", near)], threshold=0.99)
    assert kept == ["a", "b"]
    # the default collapses only identical token sets: a near copy is another answer
    assert collapse([("a", base), ("b", near), ("c", base.upper() + "!")]) == (
        ["a", "b"], {"a": ["c"]})


@pytest.mark.parametrize("n_others", [0, 80])  # the all-pairs and the prefix-filter paths
def test_near_copy_behind_a_relevance_gap_stays(n_others: int) -> None:
    base = " ".join(f"w{i}" for i in range(20))
    near = base + " extra"  # Jaccard 0.95
    others = [(f"o{i}", f"other{i} filler{i} words{i}") for i in range(n_others)]
    ranked = [("a", base), *others, ("b", near), ("c", base + ".")]
    scores = {"a": 1.0, "b": 0.9, "c": 0.5, **{d: 0.95 for d, _ in others}}
    kept, absorbed = collapse(ranked, 0.9, scores=scores)
    assert "b" in kept  # 0.1 below the survivor: more than the 0.05 gap
    assert absorbed == {"a": ["c"]}  # identical words collapse whatever the gap
    kept, absorbed = collapse(ranked, 0.9, scores={**scores, "b": 0.97})
    assert "b" not in kept and absorbed == {"a": ["b", "c"]}


def _naive_collapse(ranked: list[tuple[str, str]], threshold: float) -> list[str]:
    kept: list[tuple[str, frozenset[str]]] = []
    for doc_id, text in ranked:
        toks = tokens(text)
        if not any(jaccard(toks, other) >= threshold for _, other in kept):
            kept.append((doc_id, toks))
    return [d for d, _ in kept]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9, 1.0])
def test_prefix_filter_equals_all_pairs(seed: int, threshold: float) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    ranked = []
    for i in range(300):
        if ranked and rng.random() < 0.3:  # a mutated copy of an earlier text
            words = rng.choice(ranked)[1].split()
            words[rng.randrange(len(words))] = rng.choice(vocab)
            text = " ".join(words)
        else:
            text = " ".join(rng.choices(vocab, k=rng.randint(1, 25)))
        ranked.append((str(i), text))
    assert collapse(ranked, threshold)[0] == _naive_collapse(ranked, threshold)


def test_identical_collapse_keeps_each_ids_first_place_and_survives_a_fingerprint_collision(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ranked = [("a", "one two"), ("b", "three"), ("a", "one two"), ("c", "two one")]
    assert collapse(ranked) == (["a", "b"], {"a": ["c"]})
    # Two different word sets whose fingerprints collide stay apart: a match is confirmed
    # on the token sets themselves.
    monkeypatch.setattr(dedup, "word_set_fingerprint", lambda text: 7)
    assert collapse([("x", "alpha beta"), ("y", "gamma"), ("z", "beta alpha")]) == (
        ["x", "y"], {"x": ["z"]})


def test_word_set_fingerprint_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dedup, "_FINGERPRINTS", {})
    monkeypatch.setattr(dedup, "_FINGERPRINTS_MAX", 10)
    prints = [dedup.word_set_fingerprint(f"text number {i}") for i in range(50)]
    assert len(dedup._FINGERPRINTS) <= 11
    assert prints[0] == dedup.word_set_fingerprint("Number text 0!")  # same words, same print
    assert len(set(prints)) == 50


def test_token_set_cache_is_bounded_and_keyed_by_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dedup, "_TOKEN_SETS", {})
    monkeypatch.setattr(dedup, "_TOKEN_SETS_MAX", 10)
    for i in range(50):
        assert dedup._recent_tokens(f"text number {i}") == {"text", "number", str(i)}
    assert len(dedup._TOKEN_SETS) <= 11
    # An edited item under the same id is a new text: its own set, in a search and after.
    first = collapse([("a", "red fox"), ("b", "fox red")])
    assert first == (["a"], {"a": ["b"]})
    assert collapse([("a", "red fox"), ("b", "fox red hen")]) == (["a", "b"], {})
    assert dedup._TOKEN_SETS["fox red"] == {"fox", "red"}



@pytest.mark.parametrize("seed", range(5))
def test_tokens_is_the_regex_word_set_for_ascii_and_unicode_text(seed: int) -> None:
    import re

    rng = random.Random(seed)
    alphabet = ([chr(c) for c in range(128)] + list("éÉßİıǅ²½٣—“”…\u00a0\u2028_") + ["\x00"])
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        for sample in (text, text.encode("ascii", "ignore").decode()):
            assert tokens(sample) == frozenset(re.findall(r"\w+", sample.lower())), repr(sample)


def test_type_weights() -> None:
    policy = ScorePolicy()
    now = time.time()
    old = now - 400 * DAY_S
    assert policy.factors(kind="decision", access_count=0, created_at=old, now=now) == {"type": 2.0}
    assert policy.factors(kind="temp_note", access_count=0, created_at=old, now=now) == {"type": 0.3}
    assert policy.factors(kind="wiki_page", access_count=0, created_at=old, now=now) == {}
    assert policy.factors(kind=None, access_count=0, created_at=old, now=now) == {}


def test_access_and_recency() -> None:
    now = time.time()
    f = ScorePolicy().factors(kind=None, access_count=3, created_at=now - DAY_S, now=now)
    assert f == {"access": pytest.approx(1 + math.log(4)), "recency": pytest.approx(1.15)}
    assert apply(2.0, f) == pytest.approx(2.0 * (1 + math.log(4)) * 1.15)
    assert ScorePolicy.off().factors(kind="decision", access_count=9, created_at=now, now=now) == {}


def test_old_relevant_item_still_surfaces() -> None:
    now = time.time()
    policy = ScorePolicy()
    old_strong = apply(0.032, policy.factors(kind=None, access_count=0, created_at=now - 900 * DAY_S, now=now))
    new_weak = apply(0.016, policy.factors(kind=None, access_count=0, created_at=now, now=now))
    assert old_strong > new_weak


def test_labels() -> None:
    assert source_label(corpus="wiki", kind="wiki_page", title="Home", item_id="1", metadata={}) == "[wiki: Home]"
    assert source_label(corpus="m", kind="decision", title=None, item_id="1", metadata={}) == "[memory: decision]"
    assert source_label(corpus="docs", kind=None, title=None, item_id="42", metadata={}) == "[docs: 42]"
    assert source_label(corpus="t", kind=None, title="T", item_id="1", metadata={"n": 7},
                        template="[ticket #{n}: {title}]") == "[ticket #7: T]"
    assert source_label(corpus="t", kind=None, title="T", item_id="1", metadata={},
                        template="[{missing}{") == "[t: T]"


def test_filter_parsing() -> None:
    f = parse_filters({"kind": "decision", "metadata": {"team": ["a", "b"]}, "created_after": 5})
    assert f.kinds == ("decision",) and f.metadata == (("team", ("a", "b")),) and f.created_after == 5.0
    assert f.needs_row_filter
    assert not parse_filters(None).needs_row_filter
    for bad in ({"nope": 1}, {"metadata": {"": 1}}, {"kind": [None]}, {"metadata": {"a": float("nan")}}):
        with pytest.raises(InvalidFilterError):
            parse_filters(bad)
