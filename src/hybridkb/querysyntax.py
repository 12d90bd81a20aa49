"""The query syntax people know, parsed into scoring terms, word conditions and filters.

Pure: no I/O, never raises on any string.

    plain words       ranked by BM25, as textquery.parse reads them (unchanged)
    "quoted phrase"   its words side by side (a scoring term, as in plain text)
    +word  +"phrase"  required: every hit holds it, in every mode
    -word  -"phrase"  excluded: no hit holds it, in every mode (vector hits too)
    prefix*           words starting with the prefix: the index's most frequent ones score
    title:word  title:"a phrase"   required in the title
    kind:x  corpus:x  path:glob  language:x   filters (one field given twice: either value)

An operator needs a letter (or a quote) after it, so `-2`, `+1` and `--verbose` stay
words; a colon after an unknown word with nothing after it (`Note: ...`), a URL
(`http://`) or `std::vector` stays text. A malformed query (unbalanced quote, a lone
`-` or `+`, a field with no value, an unknown field, a bad path pattern) is searched
as plain words, exactly as textquery.parse reads it, with a note saying why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from . import textquery
from .errors import HybridKBError
from .model import Filters
from .pathglob import paths_regex
from .textquery import STOPWORDS, TextQuery

FIELDS = ("title", "kind", "corpus", "path", "language")
MIN_PREFIX = 2  # letters before a `*`: one letter would match a good part of the vocabulary

_OPERATOR = re.compile(r'[-+*:"]')  # a text without these is plain words
_SPACE = re.compile(r"\s*")
_CHUNK = re.compile(r'[^\s"]*')
_FIELD = re.compile(r"([A-Za-z]+):(.*)", re.S)
_PREFIX = re.compile(r"([^\W_]+)\*")


@dataclass(frozen=True, slots=True)
class Words:
    """A word condition: lowercase words side by side (one word is a phrase of one), or,
    with `prefix`, one word's beginning."""

    words: tuple[str, ...]
    prefix: bool = False

    def __str__(self) -> str:
        text = " ".join(self.words)
        return f"{text}*" if self.prefix else (f'"{text}"' if len(self.words) > 1 else text)


@dataclass(frozen=True, slots=True)
class TextMatch:
    """Conditions on an item's words that every retriever applies inside its query."""

    required: tuple[Words, ...] = ()  # each in the title or the text
    excluded: tuple[Words, ...] = ()  # none in the title or the text
    title: tuple[Words, ...] = ()  # each in the title

    def __bool__(self) -> bool:
        return bool(self.required or self.excluded or self.title)


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """What a search does with the user's text."""

    text: TextQuery  # BM25's terms (and prefixes)
    embed_text: str  # what the vector retriever embeds: the query, without operators
    match: TextMatch | None = None
    kinds: tuple[str, ...] | None = None
    corpora: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None
    languages: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()

    def narrow(self, filters: Filters, corpora: Sequence[str]) -> tuple[Filters, list[str], list[str]]:
        """The search's filters and corpora narrowed by the query's fields, and notes.
        A field never widens what the caller asked for; nothing left gives no corpora."""
        notes: list[str] = []
        names = list(corpora)
        if self.corpora is not None:
            names = [c for c in names if c in self.corpora]
            if not names:
                notes.append(f"corpus:{'/'.join(self.corpora)} is not among the corpora searched")
        def kept(name: str, given: tuple[str, ...] | None, values: tuple[str, ...] | None
                 ) -> tuple[str, ...] | None:
            if values is None:
                return given
            both = values if given is None else tuple(v for v in given if v in values)
            if not both:
                notes.append(f"{name}:{'/'.join(values)} is outside the search's filters")
                names.clear()
            return both

        out = replace(filters, kinds=kept("kind", filters.kinds, self.kinds),
                      languages=kept("language", filters.languages, self.languages))
        if self.paths is not None:
            if filters.paths:
                notes.append("path: in the query ignored: the search already has a path filter")
            else:
                out = replace(out, paths=self.paths)
        return out, names, notes


class _Malformed(Exception):
    """Why the text is not a query in the syntax (caught: the text is then plain words)."""


@dataclass(frozen=True, slots=True)
class _Part:
    sign: str  # "", "+" or "-"
    text: str
    field: str | None = None
    quoted: bool = False
    prefix: bool = False


def parse(text: object, *, max_terms: int = textquery.MAX_TERMS) -> ParsedQuery:
    """The query in any user text. Plain text (no operator) is textquery.parse's reading."""
    plain = textquery.parse(text, max_terms=max_terms)
    if not isinstance(text, str):
        return ParsedQuery(plain, "")
    if not _OPERATOR.search(text):  # most questions: nothing to read but words
        return ParsedQuery(plain, text)
    try:
        parts = _scan(text[: textquery.MAX_QUERY_CHARS].replace("\x00", " "))
        if not any(p.sign or p.field or p.prefix for p in parts):
            return ParsedQuery(plain, text)
        return _build(parts, max_terms)
    except _Malformed as why:
        return ParsedQuery(plain, text, notes=(f"query syntax: {why}; searched as plain words",))


def _closing_quote(text: str, start: int) -> int:
    end = text.find('"', start + 1)
    if end < 0:
        raise _Malformed("a quote is not closed")
    return end


def _scan(text: str) -> list[_Part]:
    parts: list[_Part] = []
    i, n = 0, len(text)
    while True:
        i = _SPACE.match(text, i).end()  # type: ignore[union-attr]  # \s* always matches
        if i >= n:
            break
        c = text[i]
        sign = ""
        if c in "+-":
            after = text[i + 1] if i + 1 < n else " "
            if after.isspace():
                raise _Malformed(f"a lone {c!r}")
            if after == '"' or after.isalpha() or after == "_":
                sign, i = c, i + 1
        if text[i] == '"':
            end = _closing_quote(text, i)
            parts.append(_Part(sign, text[i + 1 : end], quoted=True))
            i = end + 1
            continue
        j = _CHUNK.match(text, i).end()  # type: ignore[union-attr]  # `*` always matches
        chunk, i = text[i:j], j
        named = _FIELD.fullmatch(chunk)
        if named and named.group(1).lower() in FIELDS:
            name, value, quoted = named.group(1).lower(), named.group(2), False
            if not value and i < n and text[i] == '"':
                end = _closing_quote(text, i)
                value, quoted, i = text[i + 1 : end], True, end + 1
            if not value.strip():
                raise _Malformed(f"{name}: has no value")
            if sign == "-":
                raise _Malformed(f"-{name}: (a field filter cannot be negated)")
            parts.append(_Part(sign, value, name, quoted, not quoted and bool(_PREFIX.fullmatch(value))))
            continue
        if named and named.group(2) and not named.group(2).startswith(("/", ":")):
            raise _Malformed(f"unknown field {named.group(1)!r} (fields: {', '.join(FIELDS)})")
        parts.append(_Part(sign, chunk, prefix=bool(_PREFIX.fullmatch(chunk))))
    return parts


@dataclass(slots=True)
class _Build:
    terms: list[tuple[str, ...]] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    required: list[Words] = field(default_factory=list)
    excluded: list[Words] = field(default_factory=list)
    title: list[Words] = field(default_factory=list)
    embed: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def term(self, term: tuple[str, ...]) -> None:
        if term and term not in self.terms:
            self.terms.append(term)

    def condition(self, into: list[Words], words: Words, what: str) -> None:
        if not words.words:
            return
        if not words.prefix and all(w in STOPWORDS for w in words.words):
            self.notes.append(f"{words} is too common a word to be {what}: ignored")
        elif words not in into:
            into.append(words)


def _words(part: _Part) -> list[Words]:
    """The part's words: a phrase, a prefix, or a chunk's terms (an identifier is one phrase)."""
    if part.prefix:
        tokens = textquery.tokens(part.text[:-1])
        if len(tokens) == 1:
            return [Words(tokens, prefix=True)]
        return [Words(tokens)] if tokens else []
    if part.quoted:
        tokens = textquery.tokens(part.text)
        return [Words(tokens)] if tokens else []
    return [Words(t) for t in textquery.chunk_terms(part.text) if t]


def _build(parts: list[_Part], max_terms: int) -> ParsedQuery:
    b = _Build()
    for part in parts:
        if part.field in ("kind", "corpus", "path", "language"):
            value = part.text.strip()
            if part.field == "language":
                value = value.lower()
            values = b.values.setdefault(part.field, [])
            if value not in values:
                values.append(value)
            continue
        for found in _words(part):
            w = found
            if w.prefix and (len(w.words[0]) < MIN_PREFIX or w.words[0] in STOPWORDS):
                b.notes.append(f"{w} is too short or common a prefix: searched as the word {w.words[0]!r}")
                w = Words(w.words)  # the word itself, from here on
            if part.field == "title":
                b.condition(b.title, w, "required in the title")
            elif part.sign == "+":
                b.condition(b.required, w, "required")
            elif part.sign == "-":
                b.condition(b.excluded, w, "excluded")
            if part.sign != "-":
                if w.prefix:
                    if w.words[0] not in b.prefixes:
                        b.prefixes.append(w.words[0])
                else:
                    b.term(w.words)
        if part.sign != "-":
            b.embed.append(part.text[:-1] if part.prefix else part.text)
    paths = tuple(b.values["path"]) if "path" in b.values else None
    if paths is not None:
        try:
            paths_regex(paths)
        except HybridKBError as exc:
            raise _Malformed(f"path: {exc}") from exc
    content = [t for t in b.terms if not all(w in STOPWORDS for w in t)]
    capped = textquery.cap_terms(content or b.terms, max_terms)
    text = TextQuery(capped.terms, capped.truncated, tuple(b.prefixes))
    match = TextMatch(tuple(b.required), tuple(b.excluded), tuple(b.title))
    if text.is_empty and not "".join(b.embed).strip():
        b.notes.append("nothing to search for: the query has only excluded words or filters")

    def given(name: str) -> tuple[str, ...] | None:
        return tuple(b.values[name]) if name in b.values else None

    return ParsedQuery(text, " ".join(b.embed), match or None, given("kind"), given("corpus"),
                       paths, given("language"), tuple(b.notes))
