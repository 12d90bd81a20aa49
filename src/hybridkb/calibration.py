"""Calibrated relevance: one model that ranks a search's candidates and says how likely
each is to answer the query, from the evidence in the retrievers' own scores. Pure.

A candidate's evidence (`Evidence`):
- `coverage`: the share of the query's terms found in its title and text (a term written
  with punctuation, `raise_for_status`, or a "quoted phrase", counts only as the whole
  word sequence), by the same word split as the full-text query, with a light suffix fold;
- `bm25`: its BM25 score mapped as DBSF maps it (the list's mean - 3σ -> 0, mean + 3σ -> 1;
  0 when BM25 did not list it);
- `vector`: its cosine mapped the same way within the vector list (0 when not listed);
  the model counts it only as far as the cosine stands above the store's background
  (`counted_vector`: in full from z = 0, fading to nothing at z = -2), so the top of a
  vector list whose cosines are all at the background is no evidence;
- `cosine_z`: its cosine against the store's background, (cosine - μ) / σ, where μ and σ
  are the mean and deviation of the best cosine that unrelated probe texts get in this
  store from this model (`noise.py`): about 0 for a hit no closer than noise; the model
  reads what stands above 2 (`z_above`: no noise probe gets there but 2 in 100);
- `full`: 1 when it holds every term of the query (coverage 1), else 0.

`relevance` is a logistic model over them: 1 / (1 + e^-(b + Σ wᵢ·xᵢ)), one set of
coefficients per kind of search (both retrievers, BM25 only, vectors only). The
coefficients were fitted by logistic regression on judged pairs (each query's first 50
candidates, relevant or not by the judgments) of 300 SciFact train queries, 300 queries
nothing there answers (100 random strings, 200 LoCoMo-dev questions) and, weighted 0.1,
the identifier queries of two packages the identifier evaluation does not use (pathspec,
httpx); checked on SciFact test, NFCorpus, LoCoMo-dev and the identifier set of click
and tqdm (docs/quality.md). Re-fit with:

    python -m hybridkb.evaluation.calibrate --dataset ../shared/data/scifact --split train \
        --max-queries 300 --unanswerable ../shared/data/locomo-dev --code pathspec --code httpx
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from .textquery import cjk_expand

_WORD = re.compile(r"[^\W_]+")  # letters and digits: the split of the full-text query
_ODD = re.compile(rb"[\x80-\xff][^ ]*")  # a piece's part from its first non-ASCII byte
_NEXT = re.compile(rb" +([^ ]+)")  # the next token in a `spaced` text
# Up to this many query words, Coverage finds each in a text; past it, it splits the text
# once (1.5 KB texts: 12 words 15 against 21 µs, 16 even, 32 words 38 against 22).
_FIND_WORDS = 16
_SUFFIXES = ("ing", "ed", "es", "s")
_ENDINGS = ("s", "es", "ed", "ing", "e", "ly")
# ASCII letters lowercased, other ASCII but digits to spaces; UTF-8's bytes past ASCII kept.
_ASCII_WORDS = (bytes(ord(chr(c).lower()) if chr(c).isalnum() else 32 for c in range(128))
                + bytes(range(128, 256)))

# (intercept, coverage, bm25, counted vector, z above Z_FLOOR, full), fitted by
# hybridkb.evaluation.calibrate.
COEFFICIENTS: dict[str, tuple[float, float, float, float, float, float]] = {
    "hybrid": (-9.4015, 1.1797, 2.867, 2.3866, 0.139, 5.8475),
    "fts": (-8.9332, 2.8097, 3.8347, 0.0, 0.0, 4.8708),
    "vector": (-6.3044, 0.0, 0.0, 2.7547, 0.4917, 0.0),
}
# The cosine z over which the vector list's evidence fades in: none at or below GATE[0],
# all of it from GATE[1] (the background's mean) on.
GATE = (-2.0, 0.0)
# Cosine z counts as evidence of its own only above this: noise's best cosines reach it
# about 2 times in 100.
Z_FLOOR = 2.0
# A hit scoring below LOW is noise by the model's reading; from HIGH on it is likely an
# answer (SearchResult.confidence: "none", "low", "high").
LOW, HIGH = 0.2, 0.5


@dataclass(frozen=True, slots=True)
class Background:
    """The best cosine unrelated text gets in a store: mean and deviation over probes."""

    mean: float
    std: float


@dataclass(frozen=True, slots=True)
class Evidence:
    coverage: float = 0.0
    bm25: float = 0.0
    vector: float = 0.0
    cosine_z: float = 0.0

    @property
    def full(self) -> float:
        """1.0 when the candidate holds every term of the query."""
        return 1.0 if self.coverage >= 1.0 - 1e-9 else 0.0

    @property
    def counted_vector(self) -> float:
        """`vector` as far as the cosine stands above the background: a list's top counts
        for nothing when its cosines are what unrelated text gets in this store."""
        return self.vector * gate(self.cosine_z)

    @property
    def z_above(self) -> float:
        """How far the cosine stands above what noise reaches (Z_FLOOR deviations)."""
        return max(0.0, self.cosine_z - Z_FLOOR)

    def to_dict(self) -> dict[str, float]:
        return {"coverage": self.coverage, "bm25": self.bm25, "vector": self.vector,
                "cosine_z": self.cosine_z, "full": self.full}


def tokens(text: str) -> list[str]:
    """Lowercase word tokens, split as the full-text query splits them."""
    return [t.decode("utf-8", "surrogatepass") for t in spaced(text).split()]


def spaced(text: str) -> bytes:
    """`text`'s tokens (`tokens`) in order as UTF-8, with a space before and after each
    (one or more between two), so that `b" word "` in it says whether a token is `word`.

    ASCII letters are lowercased and other ASCII characters but digits made spaces in one
    `bytes.translate`; only the space-free pieces holding other characters (a few in a
    text) are split by the word pattern, CJK runs first made bigrams. Neither step can cut
    a word or a CJK run, so the tokens are the pattern's over the whole text, 3-4x faster
    (and in bytes, never decoded whole: a text is searched as it was encoded).
    """
    if text.isascii():
        return b" %b " % text.encode("ascii").translate(_ASCII_WORDS)
    out = text.encode("utf-8", "surrogatepass").translate(_ASCII_WORDS)
    parts = [b" "]
    done = 0
    for odd in _ODD.finditer(out):  # from a piece's first non-ASCII character to its end
        start = out.rfind(b" ", done, odd.start()) + 1 or done
        piece = out[start : odd.end()].decode("utf-8", "surrogatepass")
        words = " ".join(map(str.lower, _WORD.findall(cjk_expand(piece))))
        parts += (out[done:start], b" ", words.encode("utf-8", "surrogatepass"), b" ")
        done = odd.end()
    parts += (out[done:], b" ")
    return b"".join(parts)


@functools.lru_cache(maxsize=1 << 16)
def fold(token: str) -> str:
    """A light suffix fold, so "vitamins" meets "vitamin" and "raised" meets "raise".
    Kept per word: a search folds every word of its ~100 candidates' texts."""
    for suffix in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 4 and not token.endswith("ss"):
            return token[: -len(suffix)]
    return token


@functools.lru_cache(maxsize=4096)
def _forms(word: str) -> frozenset[str]:
    stem = fold(word)
    forms = [word, stem, *(stem + s for s in _ENDINGS)]
    if stem.endswith("e") and len(stem) > 4:  # "restore" meets "restored", "restoring"
        forms.extend(stem[:-1] + s for s in ("ed", "ing", "es"))
    return frozenset(forms)


def coverage(terms: Sequence[Sequence[str]], text: str) -> float:
    """The share of `terms` (each a word sequence, as the full-text query has them) found
    in `text`; a term of several words counts only as a contiguous run of them (with the
    suffix fold), so an identifier or a phrase counts whole or not at all."""
    return Coverage(terms)(text)


class Coverage:
    """`coverage` by one query's terms, the query's side worked out once (a search judges
    ~80 texts by the same terms). A text is not split into its ~250 words: its `spaced`
    form is searched for each query word's forms."""

    __slots__ = ("_count", "_runs", "_terms", "_words")

    def __init__(self, terms: Sequence[Sequence[str]]) -> None:
        self._count = len(terms)
        self._words = {w: _tokens_of(_forms(w)) for term in terms for w in term}
        self._terms = [tuple(term) for term in terms if term]
        # a run of several words: a token whose fold is each word's, in a row
        self._runs = {term: [_tokens_of(_unfolded(fold(w))) for w in term]
                      for term in self._terms if len(term) > 1}

    def __call__(self, text: str) -> float:
        if not self._count:
            return 0.0
        words = spaced(text)
        if len(self._words) <= _FIND_WORDS:
            has = {w: tokens.found_in(words) for w, tokens in self._words.items()}
        else:  # a long query: one split of the text beats a scan per word
            present = frozenset(words.split())
            has = {w: not present.isdisjoint(tokens.tokens) for w, tokens in self._words.items()}
        found = 0
        for term in self._terms:
            if all(has[w] for w in term) and (len(term) == 1 or _holds_run(words, self._runs[term])):
                found += 1
        return found / self._count


@functools.lru_cache(maxsize=4096)
def _unfolded(stem: str) -> frozenset[str]:
    """Every token whose `fold` is `stem` (fold strips at most one suffix)."""
    return frozenset(t for t in (stem, *(stem + s for s in _SUFFIXES)) if fold(t) == stem)


class _Tokens:
    """A set of tokens (as UTF-8), and how to find them in a `spaced` text: by the prefix
    they all share, at a word's start (bytes.find, nothing to build); when that prefix is
    under 4 bytes, too common to skip much, by a pattern of the tokens whole between spaces
    (compiled once per query word: each text then takes one scan, not one per token)."""

    __slots__ = ("_pattern", "_prefix", "tokens")

    def __init__(self, tokens: frozenset[str]) -> None:
        # "" is never a token: tokens are runs of one character or more
        self.tokens = frozenset(t.encode("utf-8", "surrogatepass") for t in tokens if t)
        ordered = sorted(self.tokens) or [b""]
        first, last = ordered[0], ordered[-1]  # the shared prefix of sorted strings is theirs
        shared = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b),
                      min(len(first), len(last)))
        self._prefix = b" " + first[:shared] if shared >= 4 else None
        alternatives = b"|".join(re.escape(t) for t in sorted(self.tokens, key=len, reverse=True))
        self._pattern = None if self._prefix is not None else re.compile(
            b" (?:%b)(?= )" % alternatives if self.tokens else b"(?!)")

    def found_in(self, words: bytes) -> bool:
        if self._pattern is not None:
            return self._pattern.search(words) is not None
        prefix = self._prefix or b""
        at = words.find(prefix)
        while at >= 0:
            end = words.index(b" ", at + 1)
            if words[at + 1 : end] in self.tokens:
                return True
            at = words.find(prefix, end)
        return False

    def ends(self, words: bytes) -> Iterator[int]:
        """Where each of the tokens in `words` ends (the index of the space after it)."""
        if self._pattern is not None:
            yield from (m.end() for m in self._pattern.finditer(words))
            return
        prefix = self._prefix or b""
        at = words.find(prefix)
        while at >= 0:
            end = words.index(b" ", at + 1)
            if words[at + 1 : end] in self.tokens:
                yield end
            at = words.find(prefix, end)


_tokens_of = functools.lru_cache(maxsize=4096)(_Tokens)


def _holds_run(words: bytes, run: list[_Tokens]) -> bool:
    """Whether `words` (a `spaced` text) has a token of each of `run` in a row."""
    for end in run[0].ends(words):
        for place in run[1:]:
            token = _NEXT.match(words, end)
            if token is None or token.group(1) not in place.tokens:
                break
            end = token.end()
        else:
            return True
    return False


def dbsf_bounds(values: Iterable[float]) -> tuple[float, float]:
    """(low, span) mapping a list's mean - 3σ to 0 and mean + 3σ to 1, as DBSF does."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return 0.0, 0.0
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    return mean - 3 * std, 6 * std


def scaled(value: float, bounds: tuple[float, float]) -> float:
    low, span = bounds
    if span <= 1e-12:
        return 0.5
    return (value - low) / span


def cosine_z(cosine: float, background: Background | None) -> float:
    if background is None:
        return 0.0
    return (cosine - background.mean) / max(background.std, 0.02)


def gate(z: float) -> float:
    """0 at or below GATE[0], 1 from GATE[1] on, linear between."""
    low, high = GATE
    return min(1.0, max(0.0, (z - low) / (high - low)))


def kind_of(has_fts: bool, has_vector: bool) -> str:
    """Which coefficient set applies to a search whose retrievers ran as given."""
    if has_fts and has_vector:
        return "hybrid"
    return "vector" if has_vector else "fts"


def logit(evidence: Evidence, kind: str) -> float:
    b, wc, wb, wv, wz, wf = COEFFICIENTS[kind]
    return (b + wc * evidence.coverage + wb * evidence.bm25 + wv * evidence.counted_vector
            + wz * evidence.z_above + wf * evidence.full)


def relevance(evidence: Evidence, kind: str) -> float:
    """The estimated probability that the candidate answers the query, in (0, 1)."""
    x = logit(evidence, kind)
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def confidence(best: float | None) -> str:
    """"high", "low" or "none", by the best hit's calibrated relevance (None: no hit)."""
    if best is None or best < LOW:
        return "none"
    return "high" if best >= HIGH else "low"
