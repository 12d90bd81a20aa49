"""A misspelled-query variant of a dataset: a set where dense retrieval is the stronger side.

The dev sets all favour BM25 (SciFact, NFCorpus and LoCoMo-dev score higher on full text
than on vectors), so a fusion tuned on them could lean on BM25 where users type fast.
This variant keeps the corpus and the judgments and gives a share of each query's longer
words one typing error (two letters swapped, one dropped, doubled or replaced by a
neighbour on the keyboard). A misspelled word no longer matches its term in the text
index, while the embedding model's subword pieces keep most of its meaning, so the
vector side wins: the test that the default fusion still helps when BM25 is the weaker
retriever.

Deterministic: which words and which edit come from a seeded generator.
"""

from __future__ import annotations

import random
from dataclasses import replace

from .beir import Dataset, Query

TYPO_SHARE = 0.5  # share of a query's eligible words that get one error
MIN_LENGTH = 4  # shorter words (and anything with a digit) stay as typed
_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_NEIGHBOURS = {
    ch: "".join(row[j] for j in (i - 1, i + 1) if 0 <= j < len(row))
    for row in _ROWS for i, ch in enumerate(row)
}


def misspell(word: str, rng: random.Random) -> str:
    """`word` with one typing error inside it (the first letter stays, as people keep it)."""
    if len(word) < MIN_LENGTH:
        return word
    pos = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(4)
    if kind == 0:  # two neighbouring letters swapped
        return word[:pos] + word[pos + 1] + word[pos] + word[pos + 2:]
    if kind == 1:  # a letter dropped
        return word[:pos] + word[pos + 1:]
    if kind == 2:  # a letter doubled
        return word[:pos] + word[pos] + word[pos:]
    near = _NEIGHBOURS.get(word[pos].lower())  # a neighbouring key hit instead
    return word[:pos] + (rng.choice(near) if near else word[pos]) + word[pos + 1:]


def misspell_query(text: str, rng: random.Random, share: float = TYPO_SHARE) -> str:
    """`text` with `share` of its eligible words (alphabetic, ≥ MIN_LENGTH letters), at
    least one where any is eligible, misspelled."""
    words = text.split(" ")
    eligible = [i for i, w in enumerate(words) if len(w) >= MIN_LENGTH and w.isalpha()]
    if not eligible:
        return text
    for i in rng.sample(eligible, max(1, round(share * len(eligible)))):
        words[i] = misspell(words[i], rng)
    return " ".join(words)


def with_query_typos(data: Dataset, share: float = TYPO_SHARE, seed: int = 14) -> Dataset:
    """`data` with every query misspelled as `misspell_query` does; corpus and qrels unchanged."""
    rng = random.Random(seed)
    queries = [Query(q.id, misspell_query(q.text, rng, share), dict(q.metadata))
               for q in data.queries]
    return replace(data, name=f"{data.name}+typos", queries=queries)
