"""A near-duplicate stress variant of a dataset: relevant documents get close copies.

Near-duplicate collapse is meant for the same content stored twice; it must never merge
two different answers that happen to share most of their words (debate arguments,
revisions of one page, templated tickets). This variant tests that on any BEIR set.
For the relevant documents of every judged query it adds one copy with a few words
changed, alternating between two kinds:

- a *decoy*: not relevant (a near-copy that answers nothing; a collapse that keeps it
  and drops the original loses the answer);
- a *sibling*: relevant to the same query with the same grade (a distinct answer worded
  almost like the first; a collapse that merges the two loses one of them).

Deterministic: word positions and replacement words come from a seeded generator.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace

from ..textquery import STOPWORDS
from .beir import Dataset, Document

DECOY, SIBLING = "~decoy", "~sibling"
CHANGED_SHARE = 0.04  # share of a copy's words replaced ("a few words changed")
MIN_CHANGED = 2


def _content(word: str) -> bool:
    """An alphabetic word of 4+ letters that no backend drops as a stopword."""
    return word.isalpha() and len(word) > 3 and word.lower() not in STOPWORDS


def _vocabulary(docs: list[Document], rng: random.Random, size: int = 5000) -> list[str]:
    words: list[str] = []
    for doc in rng.sample(docs, min(len(docs), 400)):
        words.extend(w for w in doc.text.split() if _content(w))
    return sorted(set(words))[:size] or ["other"]


def near_copy(text: str, rng: random.Random, vocabulary: list[str]) -> str:
    """`text` with CHANGED_SHARE of its words (at least MIN_CHANGED) replaced by other words.

    Content words are replaced by content words where the text has enough of them, so a
    copy is as long as its original to a retriever that drops stopwords (PostgreSQL's
    `english` configuration): a copy that gained terms would be a longer document, lose
    every close BM25 race to its original and flatter BM25 again (see `_copy_id`)."""
    words = text.split()
    if not words:
        return text
    n = min(len(words), max(MIN_CHANGED, round(CHANGED_SHARE * len(words))))
    content = [i for i, w in enumerate(words) if _content(w)]
    positions = range(len(words)) if len(content) < n else content
    for pos in rng.sample(positions, n):
        words[pos] = rng.choice(vocabulary)
    return " ".join(words)


def _copy_id(doc_id: str, kind: str) -> str:
    """The copy's id: the original's with `kind` after it, and "!" or "~" before it (half
    each, by a hash of the id). Equal scores are ordered by id; a copy that always sorted
    after its original would win no exact tie (BM25 gives one wherever the changed words
    miss the query), and would flatter whichever retriever ties most."""
    return ("!" if zlib.crc32(doc_id.encode("utf-8")) % 2 else "~") + doc_id + kind


def with_near_duplicates(data: Dataset, seed: int = 14) -> Dataset:
    """`data` with a decoy or a sibling added for each relevant document (alternating).

    Added documents come after the originals (so cached embeddings of the originals stay
    valid; `Dataset.generated` counts them) and their ids end in `~decoy` / `~sibling`
    (see `_copy_id`).
    """
    rng = random.Random(seed)
    by_id = {d.id: d for d in data.corpus}
    vocabulary = _vocabulary(data.corpus, rng)
    added: list[Document] = []
    qrels = {q: dict(judged) for q, judged in data.qrels.items()}
    made: dict[str, str] = {}  # original id -> the copy's id (one copy per document)
    turn = 0
    for qid, judged in data.qrels.items():
        for doc_id, grade in sorted(judged.items()):
            if grade <= 0 or doc_id not in by_id:
                continue
            if doc_id not in made:
                kind = DECOY if turn % 2 == 0 else SIBLING
                turn += 1
                src = by_id[doc_id]
                copy_id = _copy_id(doc_id, kind)
                added.append(Document(copy_id, src.title, near_copy(src.text, rng, vocabulary),
                                      dict(src.metadata)))
                made[doc_id] = copy_id
            copy_id = made[doc_id]
            if copy_id.endswith(SIBLING):
                qrels[qid][copy_id] = grade
    return replace(data, name=f"{data.name}+neardup", corpus=[*data.corpus, *added], qrels=qrels,
                   generated=data.generated + len(added))
