"""User text -> a safe full-text query. Pure: no I/O, never raises on any string.

The user's words become quoted terms joined with OR: quoting strips every FTS5
operator of its power (`AND`, `NOT`, `*`, `-`, `:`, `NEAR(`), and OR lets BM25
rank documents matching more and rarer terms higher, which is what
natural-language questions need. Word runs joined by punctuation
(`migration_032`, `node.js`, `a:b`) stay one phrase, so exact identifiers match
exactly. An explicit "quoted phrase" is kept as a phrase.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TERMS = 64
PREFIX_TERMS = 16  # a prefix scores as the index's most frequent words starting with it
MAX_QUERY_CHARS = 20_000  # longer input is cut before any regex runs
CJK_PHRASE_CHARS = 4  # a CJK run up to this long is searched as a word (a phrase of its bigrams)

# Chinese, Japanese and Korean are written without spaces between words, so a tokenizer that
# splits on spaces and punctuation sees a whole sentence as one word. Each run of these
# scripts is indexed and queried as its overlapping character bigrams ("東京都" -> "東京 京都"),
# the usual answer of CJK full-text search: a word of two or more characters is then a phrase
# of adjacent bigrams. Hangul, kana and Han (with their compatibility and extension blocks);
# CJK punctuation (U+3000-303F) stays a separator.
_CJK_RUN = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+")
# The same class split in two for finding whether a text holds any: the BMP part alone
# scans a text three times as fast as the whole class, and a text can hold a character
# of the astral part only when it has a character past the BMP (its UTF-16 is longer).
_CJK_BMP = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f]")
_CJK_ASTRAL = re.compile("[\U00020000-\U0003134f]")

_PHRASE = re.compile(r'"([^"]*)"')
_CHUNK = re.compile(r'[^\s"]+')
_WORD = re.compile(r"[^\W_]+")  # letters and digits, as FTS5's unicode61 tokenizer splits

# Lucene's English stop set (what Anserini's BM25 baselines drop); kept for reference.
LUCENE_STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
       then there these they this to was will with""".split()
)

# The Snowball English stop list (PostgreSQL's `english` configuration drops the same
# words). A query keeps a term made only of these when it has nothing else: question
# words ("when did", "what was") match most chat turns and drown the content words.
# Measured against the Lucene set above, FTS5 nDCG@10: LoCoMo-dev 0.477 -> 0.514,
# NFCorpus 0.320 -> 0.326, SciFact 0.690 -> 0.689 (docs/quality.md).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
       being below between both but by can could did do does doing down during each few for
       from further had has have having he her here hers herself him himself his how i if in
       into is it its itself just me more most my myself no nor not now of off on once only or
       other our ours ourselves out over own same she should so some such than that the their
       theirs them themselves then there these they this those through to too under until up
       very was we were what when where which while who whom why will with would you your yours
       yourself yourselves""".split()
)


@dataclass(frozen=True, slots=True)
class TextQuery:
    """Terms of a query: each term is a tuple of lowercase word tokens (a phrase)."""

    terms: tuple[tuple[str, ...], ...]
    truncated: bool = False
    # Word prefixes (`comput*`, querysyntax.py), lowercase: each backend scores the words
    # of its index that start with one as terms of their own (PREFIX_TERMS at most).
    prefixes: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.terms and not self.prefixes

    def with_terms(self, extra: list[tuple[str, ...]]) -> TextQuery:
        """The query with `extra` terms (a prefix's words, found by a backend) and no prefixes."""
        terms = list(self.terms)
        terms.extend(t for t in dict.fromkeys(extra) if t and t not in self.terms)
        return TextQuery(tuple(terms), self.truncated)

    def fts5(self) -> str | None:
        """An FTS5 MATCH expression (quoted terms joined by OR), or None when empty."""
        if not self.terms:
            return None
        return " OR ".join('"' + " ".join(term) + '"' for term in self.terms)

    @property
    def words(self) -> list[str]:
        """Every distinct token, in order (for backends that build their own query)."""
        seen: dict[str, None] = {}
        for term in self.terms:
            for tok in term:
                seen.setdefault(tok, None)
        return list(seen)


def cjk_expand(text: str) -> str:
    """`text` with each CJK run replaced by its overlapping bigrams, set apart by spaces.

    The one rule for documents and queries alike (SQLite's FTS5 source view and
    PostgreSQL's tsvector apply it to what they index): other scripts pass unchanged.
    """
    if not has_cjk(text):
        return text
    return _CJK_RUN.sub(lambda m: f" {_bigrams(m.group())} ", text)


def has_cjk(text: str) -> bool:
    """Whether `text` holds a character of a CJK run (`_CJK_RUN`), found cheaply: every
    document goes through here (cjk_expand), a quarter of them not ASCII."""
    if text.isascii():
        return False
    if _CJK_BMP.search(text):
        return True
    return len(text.encode("utf-16-le", "surrogatepass")) > 2 * len(text) \
        and _CJK_ASTRAL.search(text) is not None


def _bigrams(run: str) -> str:
    return run if len(run) < 3 else " ".join(run[i : i + 2] for i in range(len(run) - 1))


def chunk_terms(chunk: str) -> list[tuple[str, ...]]:
    """A chunk's terms: one phrase, except that a CJK run longer than a word (a sentence
    written without spaces) gives each of its bigrams as a term of its own, so BM25 ranks
    by how many of them a document has instead of requiring the whole sentence."""
    runs = [m.group() for m in _CJK_RUN.finditer(chunk) if len(m.group()) > CJK_PHRASE_CHARS]
    if not runs:
        return [tokens(chunk)]
    rest = _CJK_RUN.sub(lambda m: m.group() if len(m.group()) <= CJK_PHRASE_CHARS else " ", chunk)
    terms = [tokens(rest)]
    for run in runs:
        terms.extend((run[i : i + 2],) for i in range(len(run) - 1))
    return terms


def tokens(chunk: str) -> tuple[str, ...]:
    """A chunk's words, lowercase, CJK runs as bigrams."""
    return tuple(t.lower() for t in _WORD.findall(cjk_expand(chunk)))


def parse(text: object, *, max_terms: int = MAX_TERMS) -> TextQuery:
    """Turn any user text into a TextQuery; empty when nothing searchable is left."""
    if not isinstance(text, str):
        return TextQuery(())
    text = text[:MAX_QUERY_CHARS].replace("\x00", " ")
    terms: list[tuple[str, ...]] = []

    def add(term: tuple[str, ...]) -> None:
        if term and term not in seen:
            seen.add(term)
            terms.append(term)

    seen: set[tuple[str, ...]] = set()
    rest = []
    pos = 0
    for m in _PHRASE.finditer(text):
        rest.append(text[pos : m.start()])
        add(tokens(m.group(1)))
        pos = m.end()
    rest.append(text[pos:])
    for part in rest:
        for chunk in _CHUNK.findall(part):
            for term in chunk_terms(chunk):
                add(term)
    content = [t for t in terms if not all(w in STOPWORDS for w in t)]
    return cap_terms(content or terms, max_terms)


def cap_terms(terms: list[tuple[str, ...]], max_terms: int) -> TextQuery:
    """Bound the work: over the cap, drop stopwords, then keep the longest terms.

    FTS cost grows faster than the number of OR-ed terms (a pasted 661-term
    paragraph took seconds); long, rare-looking words carry most of BM25's weight.
    """
    if len(terms) <= max_terms:
        return TextQuery(tuple(terms))
    content = [t for t in terms if not (len(t) == 1 and t[0] in STOPWORDS)] or terms
    if len(content) > max_terms:
        keep = set(sorted(range(len(content)), key=lambda i: (-sum(map(len, content[i])), i))[:max_terms])
        content = [t for i, t in enumerate(content) if i in keep]
    return TextQuery(tuple(content), truncated=True)


def plain_words(text: object, limit: int = 16) -> list[str]:
    """Words for the substring fallback: distinct, lowercase, longest first."""
    if not isinstance(text, str):
        return []
    words = {w.lower() for w in _WORD.findall(text[:MAX_QUERY_CHARS]) if len(w) >= 2}
    return sorted(words, key=lambda w: (-len(w), w))[:limit]
