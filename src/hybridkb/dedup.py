"""Near-duplicate collapse over a ranked list. Pure.

Token-set Jaccard similarity; the best-ranked copy survives and the others are
returned as its alternates. Candidate pairs come from prefix filtering (Bayardo
et al., "Scaling up all pairs similarity search", 2007): with tokens in one
global order (rarest first), two sets with Jaccard >= t must share a token in
their first |x| - ceil(t·|x|) + 1 tokens, so most pairs are never compared.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from .model import Key

# 1.0: only true duplicates (the same set of words) collapse by default. Near copies with
# a few words changed are often different answers (a revised figure, a counter-argument):
# measured on the --near-duplicates dev sets, Jaccard 0.9 cost recall (docs/quality.md).
DEFAULT_THRESHOLD = 1.0
# A copy is never absorbed by a survivor that scores more than this much higher (on the
# 0-1 relevance scale of a search): a relevance gap means the texts answer differently.
DEFAULT_MAX_GAP = 0.05
_ALL_PAIRS_UP_TO = 64  # below this, sorting tokens for prefix filtering costs more than it saves
_WORD = re.compile(r"\w+")


# ASCII bytes that \w does not match, as spaces: an ASCII text's words are then its
# whitespace-separated runs (a bytes translate and a split cost half a regex scan).
_ASCII_WORDS = bytes(c if c >= 128 or chr(c).isalnum() or c == ord("_") else 32 for c in range(256))


def tokens(text: str) -> frozenset[str]:
    r"""The set of lowercased \w+ runs (the same set for ASCII text by the faster route)."""
    if text.isascii():
        return frozenset(text.lower().encode("ascii").translate(_ASCII_WORDS).decode("ascii").split())
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _similar(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    """Jaccard(a, b) >= threshold; set sizes alone rule most pairs out (J <= min/max)."""
    small, large = sorted((len(a), len(b)))
    return threshold * large <= small + 1e-9 and jaccard(a, b) >= threshold


def _prefix_length(size: int, threshold: float) -> int:
    return size - math.ceil(threshold * size - 1e-9) + 1


def collapse(
    ranked: Sequence[tuple[Key, str]], threshold: float = DEFAULT_THRESHOLD,
    *, scores: Mapping[Key, float] | None = None, max_gap: float = DEFAULT_MAX_GAP,
    token_sets: dict[Key, frozenset[str]] | None = None, prints: Mapping[Key, int | None] | None = None,
) -> tuple[list[Key], dict[Key, list[Key]]]:
    """Collapse near-duplicates in a best-first list of (id, text).

    With `scores` (each id's score on a 0-1 scale, e.g. its share of the list's best), a
    near copy is only absorbed when it scores within `max_gap` of the survivor: two texts
    that a retriever tells apart by that much are not the same answer.
    `token_sets` memoizes each id's token set across calls (one search collapses each
    retriever's list and then the fused one: tokenizing is most of the cost).
    `prints` holds the stored `word_print` of ids that have one (threshold 1.0 then
    tokenizes only to confirm a match).
    Returns the surviving ids in order and, per survivor, the ids it absorbed.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"dedup threshold must be in (0, 1], got {threshold}")
    memo = token_sets if token_sets is not None else {}
    firsts: dict[Key, str] = {}
    for doc_id, text in ranked:
        firsts.setdefault(doc_id, text)  # the first (best) place of each id, in order
    unique = list(firsts.items())
    if threshold >= 1.0:  # identical token sets: no gap can separate them
        return _collapse_identical(unique, memo, prints or {})
    docs = [(doc_id, _memo_tokens(memo, doc_id, text)) for doc_id, text in unique]

    def close(survivor: Key, doc: Key) -> bool:
        return scores is None or scores.get(survivor, 0.0) - scores.get(doc, 0.0) <= max_gap

    if len(docs) <= _ALL_PAIRS_UP_TO:
        return _collapse_all_pairs(docs, threshold, close)
    freq = Counter(tok for _, toks in docs for tok in toks)
    # One global rare-first order; each token's place is a single dict lookup.
    place = {tok: i for i, tok in enumerate(sorted(freq, key=lambda t: (freq[t], t)))}

    kept: list[Key] = []
    kept_sets: list[frozenset[str]] = []
    absorbed: dict[Key, list[Key]] = {}
    prefix_index: dict[str, list[int]] = {}
    empty_kept: int | None = None
    for doc_id, toks in docs:
        if not toks:
            if empty_kept is None:
                empty_kept = len(kept)
                kept.append(doc_id)
                kept_sets.append(toks)
            else:
                absorbed.setdefault(kept[empty_kept], []).append(doc_id)
            continue
        ordered = sorted(toks, key=place.__getitem__)
        prefix = ordered[: _prefix_length(len(ordered), threshold)]
        candidates = sorted({idx for tok in prefix for idx in prefix_index.get(tok, ())})
        match = next((idx for idx in candidates if _same(toks, kept_sets[idx], threshold)
                      and (toks == kept_sets[idx] or close(kept[idx], doc_id))), None)
        if match is not None:
            absorbed.setdefault(kept[match], []).append(doc_id)
            continue
        for tok in prefix:
            prefix_index.setdefault(tok, []).append(len(kept))
        kept.append(doc_id)
        kept_sets.append(toks)
    return kept, absorbed


def _same(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    """Similar enough to be one text (identical token sets always are)."""
    return a == b or _similar(a, b, threshold)


def _collapse_all_pairs(
    docs: list[tuple[Key, frozenset[str]]], threshold: float, close: Callable[[Key, Key], bool],
) -> tuple[list[Key], dict[Key, list[Key]]]:
    """Short lists: compare each doc with every kept one whose size could qualify."""
    kept: list[tuple[Key, frozenset[str]]] = []
    absorbed: dict[Key, list[Key]] = {}
    for doc_id, toks in docs:
        match = next((kid for kid, other in kept
                      if _same(toks, other, threshold) and (toks == other or close(kid, doc_id))),
                     None)
        if match is None:
            kept.append((doc_id, toks))
        else:
            absorbed.setdefault(match, []).append(doc_id)
    return [d for d, _ in kept], absorbed


def _memo_tokens(memo: dict[Key, frozenset[str]], doc_id: Key, text: str) -> frozenset[str]:
    toks = memo.get(doc_id)
    if toks is None:
        toks = memo[doc_id] = _recent_tokens(text)
    return toks


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Texts tokenized lately -> their token sets: a search confirms each fingerprint match on
# the token sets, and the same copies meet search after search. Keyed by the text itself
# (a dict compares the strings on a hash match); bounded, oldest out first.
_TOKEN_SETS: dict[str, frozenset[str]] = {}
_TOKEN_SETS_MAX = 4_096


def _recent_tokens(text: str) -> frozenset[str]:
    return _remembered(_TOKEN_SETS, _TOKEN_SETS_MAX, text, lambda: tokens(text))


def _remembered(cache: dict[K, V], limit: int, key: K, make: Callable[[], V]) -> V:
    """`cache[key]`, made by `make()` when missing; past `limit` entries the oldest goes.
    Threads may race here: a lost entry is only made again."""
    found = cache.get(key)
    if found is None:
        found = cache[key] = make()
        if len(cache) > limit:
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # another thread evicted
                del cache[next(iter(cache))]
    return found


# Texts seen lately -> the hash of their token set. Tokenizing is most of a search's
# dedup cost, and the same items come back query after query. Keyed by the text's own
# hash and length (no id: an edited item is a new text); bounded, oldest out first.
# Stores keep each item's print beside it (written once, with the item), so a search
# only computes it for rows written before the column existed.
_FINGERPRINTS: dict[tuple[int, int], int] = {}
_FINGERPRINTS_MAX = 100_000


def word_print(text: str) -> int:
    """A stable signed 64-bit hash of the text's token set (the same in every process and
    on every platform, so a store can keep it): equal token sets give equal prints. The
    hash of the sorted tokens' UTF-8 bytes joined by NUL (UTF-8 sorts as code points do)."""
    joined = b"\x00".join(sorted(_token_bytes(text)))
    return int.from_bytes(hashlib.blake2b(joined, digest_size=8).digest(), "little", signed=True)


def _token_bytes(text: str) -> set[bytes]:
    r"""`tokens(text)` as UTF-8 bytes, by the bytes route for all but the words holding a
    non-ASCII character: UTF-8 never puts an ASCII byte inside a character, so ASCII non-word
    bytes split the text where \w+ would, and only the pieces with other bytes are split
    again by the regex (a curly quote, an accented word). Every text is written with its print:
    this took a bulk add's print from 99 to 55 us a text (a quarter of the texts not ASCII)."""
    if text.isascii():
        return set(text.lower().encode("ascii").translate(_ASCII_WORDS).split())
    words = set(text.lower().encode("utf-8", "surrogatepass").translate(_ASCII_WORDS).split())
    mixed = [w for w in words if not w.isascii()]
    words.difference_update(mixed)
    for piece in mixed:
        words.update(w.encode("utf-8", "surrogatepass")
                     for w in _WORD.findall(piece.decode("utf-8", "surrogatepass")))
    return words


def word_set_fingerprint(text: str) -> int:
    """`word_print(text)`, remembered for texts seen lately."""
    return _remembered(_FINGERPRINTS, _FINGERPRINTS_MAX, (len(text), hash(text)),
                       lambda: word_print(text))


def _collapse_identical(
    docs: list[tuple[Key, str]], memo: dict[Key, frozenset[str]], prints: Mapping[Key, int | None],
) -> tuple[list[Key], dict[Key, list[Key]]]:
    """Threshold 1.0: equal token sets, found by their prints (stored, or computed when
    not seen lately); texts are tokenized only to confirm a match."""
    first: dict[int, list[tuple[Key, str]]] = {}
    kept: list[Key] = []
    absorbed: dict[Key, list[Key]] = {}
    for doc_id, text in docs:
        stored = prints.get(doc_id)
        same_print = first.setdefault(word_set_fingerprint(text) if stored is None else stored, [])
        survivor = None
        if same_print:  # confirm on the token sets: a fingerprint can collide
            toks = _memo_tokens(memo, doc_id, text)
            survivor = next((sid for sid, stext in same_print
                             if _memo_tokens(memo, sid, stext) == toks), None)
        if survivor is None:
            same_print.append((doc_id, text))
            kept.append(doc_id)
        else:
            absorbed.setdefault(survivor, []).append(doc_id)
    return kept, absorbed


def collapse_by_vectors(
    ranked_ids: Sequence[Key], vectors: dict[Key, npt.NDArray[np.float32]], threshold: float,
) -> tuple[list[Key], dict[Key, list[Key]]]:
    """Collapse a best-first list by cosine similarity of stored (unit) vectors.

    Items without a vector are kept as they are. One matrix product covers every
    pair, so a few hundred candidates cost well under a millisecond.
    """
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"cosine threshold must be in [-1, 1], got {threshold}")
    with_vec = [d for d in dict.fromkeys(ranked_ids) if d in vectors]
    if len(with_vec) < 2:
        return list(dict.fromkeys(ranked_ids)), {}
    matrix = np.vstack([vectors[d] for d in with_vec])
    sims = np.einsum("ik,jk->ij", matrix, matrix)  # on this thread: not OpenBLAS's pool (vector_math)
    position = {d: i for i, d in enumerate(with_vec)}
    kept: list[Key] = []
    kept_rows: list[int] = []
    absorbed: dict[Key, list[Key]] = {}
    for doc in dict.fromkeys(ranked_ids):
        row = position.get(doc)
        if row is not None and kept_rows:
            close = np.flatnonzero(sims[row, kept_rows] >= threshold)
            if close.size:
                absorbed.setdefault(with_vec[kept_rows[int(close[0])]], []).append(doc)
                continue
        kept.append(doc)
        if row is not None:
            kept_rows.append(row)
    return kept, absorbed
