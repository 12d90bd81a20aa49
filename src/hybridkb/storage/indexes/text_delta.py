"""Committed writes the tantivy index does not hold yet, searched beside it.

A tantivy commit costs about 100 ms on our machines whatever its size, so a search
right after a write does not wait for one: the items changed since the index's
sequence are read from the store, analyzed with the index's analyzer and scored here
by the same BM25 formula tantivy uses (Lucene's idf, k1 1.2, b 0.75, the index's own
document count, document frequencies and average length); their older versions in the
index are excluded from its answer. A background commit then folds them in. The only
difference from a committed document: tantivy stores lengths in one lossy byte, the
delta scores the exact length (a few percent on long texts, for a second or so).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...querysyntax import TextMatch, Words
from ...textquery import TextQuery, cjk_expand
from .text_schema import TextDoc, analyzed, body_of, term_words

K1 = 1.2
B = 0.75


def idf(n_docs: int, df: int) -> float:
    """Lucene's idf, as tantivy's (and PostgreSQL's bm25 here)."""
    return math.log(1 + (max(n_docs, df) - df + 0.5) / (df + 0.5))


@dataclass(slots=True)
class PendingDoc:
    seq: int  # the last change of this rowid the delta has seen
    body: str | None  # the indexed body; None: deleted
    folded: str = ""  # lowercase, diacritics stripped: a cheap test before analyzing
    tokens: list[str] | None = None  # analyzed body, when a search first needed it
    title: str | None = None
    corpus: str = ""
    title_tokens: list[str] | None = None

    def words(self, analyze: Callable[[str], list[str]]) -> list[str]:
        if self.tokens is None:
            self.tokens = analyze(self.body or "")
        return self.tokens

    def title_words(self, analyze: Callable[[str], list[str]]) -> list[str]:
        if self.title_tokens is None:
            self.title_tokens = analyze(cjk_expand(self.title)) if self.title else []
        return self.title_tokens

    def holds_required(self, match: TextMatch, analyze: Callable[[str], list[str]]) -> bool:
        """Whether the document holds every required word, and every title word in its title."""
        body = self.words(analyze)
        return (all(_holds(body, w, analyze) for w in match.required)
                and all(_holds(self.title_words(analyze), w, analyze) for w in match.title))

    def holds_excluded(self, match: TextMatch, analyze: Callable[[str], list[str]]) -> bool:
        body = self.words(analyze)
        return any(_holds(body, w, analyze) for w in match.excluded)

    def passes(self, match: TextMatch, analyze: Callable[[str], list[str]]) -> bool:
        """True when the document holds every required (and title) word and no excluded one."""
        return self.holds_required(match, analyze) and not self.holds_excluded(match, analyze)

    def may_hold(self, token: str) -> bool:
        """False only when the body cannot hold an analyzed `token`: a stem is its word's
        prefix but for the last letter (happi / happy), so that much must appear."""
        return token[: max(2, len(token) - 1)] in self.folded


def fold(text: str) -> str:
    """Lowercase without diacritics, as the index's ascii folding sees letters."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


@dataclass(slots=True)
class IndexStats:
    """What BM25 needs from the committed index."""

    docs: int
    avgdl: float
    doc_freq: Callable[[str], int]


@dataclass(slots=True)
class TextDelta:
    """Rowid -> its pending state, for every change after `base_seq` up to `seq`."""

    base_seq: int = 0
    seq: int = 0
    docs: dict[int, PendingDoc] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.docs)

    def copy(self) -> TextDelta:
        """A copy to change: a search keeps the delta it was given, unchanged."""
        return TextDelta(self.base_seq, self.seq, dict(self.docs))

    def rebase(self, base_seq: int) -> None:
        """The index now holds everything through `base_seq`: forget what it covers."""
        if base_seq <= self.base_seq:
            return
        self.base_seq = base_seq
        self.docs = {r: d for r, d in self.docs.items() if d.seq > base_seq}
        self.seq = max(self.seq, base_seq)

    def add(self, changes: Sequence[tuple[int, int]], docs: Sequence[TextDoc],
            analyze: Callable[[str], list[str]], title_repeat: int, reached: int) -> None:
        """Record `changes` ((seq, rowid) pairs) with the rowids' current documents."""
        current = {d.rowid: d for d in docs}
        last: dict[int, int] = {}
        for seq, rowid in changes:
            last[rowid] = max(seq, last.get(rowid, 0))
        for rowid, seq in last.items():
            doc = current.get(rowid)
            if doc is None:
                self.docs[rowid] = PendingDoc(seq, None)
            else:
                body = body_of(doc.title, doc.text, title_repeat)
                self.docs[rowid] = PendingDoc(seq, body, fold(body), title=doc.title, corpus=doc.corpus)
        self.seq = max(self.seq, reached)

    @property
    def rowids(self) -> list[int]:
        return list(self.docs)

    def live_rowids(self) -> list[int]:
        return [r for r, d in self.docs.items() if d.body is not None]

    def matching(self, match: TextMatch,
                 analyze: Callable[[str], list[str]]) -> tuple[set[int], set[int]]:
        """(live documents holding every required and title word, those holding an excluded one)."""
        required: set[int] = set()
        excluded: set[int] = set()
        for rowid, doc in self.docs.items():
            if doc.body is None:
                continue
            if doc.holds_required(match, analyze):
                required.add(rowid)
            if doc.holds_excluded(match, analyze):
                excluded.add(rowid)
        return required, excluded

    def prefix_words(self, stem: str, corpora: Sequence[str] | None,
                     analyze: Callable[[str], list[str]]) -> dict[str, int]:
        """Analyzed words starting with `stem` in the live documents of `corpora`, with the
        number of documents holding each."""
        counts: dict[str, int] = {}
        wanted = None if corpora is None else set(corpora)
        for doc in self.docs.values():
            if doc.body is None or (wanted is not None and doc.corpus not in wanted):
                continue
            if not doc.may_hold(stem):
                continue
            for word in {t for t in doc.words(analyze) if t.startswith(stem)}:
                counts[word] = counts.get(word, 0) + 1
        return counts

    def search(self, query: TextQuery, analyze: Callable[[str], list[str]], stats: IndexStats,
               allowed: set[int], match: TextMatch | None = None) -> list[tuple[int, float]]:
        """BM25 of the pending documents in `allowed` that match any query term (and `match`)."""
        terms = term_words(query, analyze)
        if not terms or not allowed:
            return []
        live = [d for d in self.docs.values() if d.body is not None]
        n_docs = stats.docs + len(live)
        avgdl = stats.avgdl or 1.0
        out: list[tuple[int, float]] = []
        idf_cache: dict[str, float] = {}

        def idf_of(tok: str) -> float:
            if tok not in idf_cache:
                df = stats.doc_freq(tok) + sum(
                    1 for d in live if d.may_hold(tok) and tok in d.words(analyze))
                idf_cache[tok] = idf(n_docs, df)
            return idf_cache[tok]

        for rowid in allowed:
            pending = self.docs.get(rowid)
            if pending is None or pending.body is None:
                continue
            if not any(pending.may_hold(t) for term in terms for t in term):
                continue  # analyzing it could find nothing
            tokens = pending.words(analyze)
            dl = len(tokens)
            score = 0.0
            for term in terms:
                tf = _count(tokens, term)
                if tf:
                    weight = sum(idf_of(t) for t in term)
                    score += weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
            if score > 0 and (not match or pending.passes(match, analyze)):
                out.append((rowid, score))
        return out


def _holds(tokens: list[str], words: Words, analyze: Callable[[str], list[str]]) -> bool:
    """Whether analyzed `tokens` hold a word condition (a prefix: a word starting with its stem)."""
    wanted = analyzed(words, analyze)
    if not wanted:
        return False
    if words.prefix:
        return any(t.startswith(wanted[0][1]) for t in tokens)
    span = wanted[-1][0]
    return any(all(tokens[i + place] == tok for place, tok in wanted)
               for i in range(len(tokens) - span))


def _count(tokens: list[str], phrase: list[str]) -> int:
    """Occurrences of `phrase` (one token or consecutive tokens) in `tokens`."""
    if len(phrase) == 1:
        return tokens.count(phrase[0])
    n = len(phrase)
    return sum(1 for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase)
