"""calibration.tokens and calibration.coverage against their plain definitions.

The module finds tokens and terms by searching the text (bytes.translate, a pattern per
query word) rather than splitting it; these reference versions split it word by word
as the definitions read, and every answer must be the same, character for character."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import pytest

from hybridkb import calibration
from hybridkb.textquery import cjk_expand

_WORD = re.compile(r"[^\W_]+")


def reference_tokens(text: str) -> list[str]:
    """Runs of letters and digits (CJK runs as bigrams), each lowercased."""
    return [t.lower() for t in _WORD.findall(cjk_expand(text))]


def reference_coverage(terms: Sequence[Sequence[str]], text: str) -> float:
    if not terms:
        return 0.0
    listed = reference_tokens(text)
    words = set(listed)
    folded = [calibration.fold(t) for t in listed]
    found = 0
    for term in terms:
        if not term or any(words.isdisjoint(calibration._forms(w)) for w in term):
            continue
        if len(term) > 1:
            run = [calibration.fold(w) for w in term]
            if not any(folded[i : i + len(run)] == run for i in range(len(folded))):
                continue
        found += 1
    return found / len(terms)


# Characters whose case, width, script or class has tripped tokenizers: a dotted capital I
# (lowercases to two characters), the Kelvin sign (lowercases to ASCII k), final sigma,
# sharp s, no-break and ideographic spaces, a lone surrogate, a combining mark, a ligature,
# Roman and Arabic-Indic numerals, zero-width characters, CJK, Hangul and katakana.
_NASTY = ["\u0130", "\u212a", "\u03a3", "\u03c3", "\u00df", "\u2013", "\u00b2", "\u3000", "\u4e2d",
          "\u6587", "\u5b57", "\uac00", "\u30fb", "\ud800", "\u0307", "\u1e9e", "\ufb01", "\u0345",
          "\U00020001", "\u2160", "\u00bd", "\u0660", "\u200b", "\ufeff", "\u1100", "\u00a0", "\x85"]
_ALPHABET = [*"aZ09 _-.'\t\n\x1c", *_NASTY]


def test_tokens_match_the_word_pattern_on_every_code_point_in_context() -> None:
    # the planes with assigned letters and digits, and the tags and variation selectors
    for start in (*range(0, 0x32000, 0x1000), 0xE0000):
        text = "".join(f"Ab{c}\u03a3 x{c}{c}K" for c in map(chr, range(start, start + 0x1000)))
        assert calibration.tokens(text) == reference_tokens(text), hex(start)


def test_tokens_match_the_word_pattern_on_random_text() -> None:
    rnd = random.Random(7)
    for _ in range(20_000):
        text = "".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(0, 24)))
        assert calibration.tokens(text) == reference_tokens(text), repr(text)


@pytest.mark.parametrize(("seed", "most_terms"), [(0, 5), (1, 5), (2, 5), (3, 5), (4, 30)])
def test_coverage_matches_its_definition(seed: int, most_terms: int) -> None:
    # up to 5 terms: each query word looked for in the text; up to 30: the text split once
    rnd = random.Random(seed)
    stems = ["vitamin", "raise", "status", "cell", "s", "1", "000", "restore", "class", "b12",
             "grüße", "中文", "kelvin", "σ"]
    endings = ["", "s", "es", "ed", "ing", "e", "ly", "ss"]

    def word() -> str:
        return rnd.choice(stems) + rnd.choice(endings)

    for _ in range(3_000):
        terms = [tuple(word() for _ in range(rnd.choice((1, 1, 1, 2, 3))))
                 for _ in range(rnd.randint(0, most_terms))]
        if rnd.random() < 0.05:
            terms.append(())
        pieces = [word() if rnd.random() < 0.6 else rnd.choice(_ALPHABET) for _ in range(rnd.randint(0, 30))]
        text = "".join(p + rnd.choice([" ", " ", "-", "_", ", ", "", "\u2013", "\u00a0"]) for p in pieces)
        if rnd.random() < 0.3:
            text = text.upper()
        assert calibration.coverage(terms, text) == reference_coverage(terms, text), (terms, text)
        assert calibration.Coverage(terms)(text) == reference_coverage(terms, text), (terms, text)


def test_a_term_counts_only_where_its_words_stand_in_a_row() -> None:
    cover = calibration.Coverage([("raise", "for", "status"), ("vitamin", "level")])
    assert cover("def raise_for_status(self): vitamins") == 0.5
    assert cover("VITAMINS  --\u2013 levels, raise_for_status") == 1.0  # any separators, folded
    assert cover("raise for the status; vitamin and its level") == 0.0
    assert cover("") == 0.0
