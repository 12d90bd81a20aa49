"""Show the part of a hit that matched: the best lines or window, query terms highlighted. Pure.

A term matches a word that starts with it, case-insensitively ("migrat" finds
"migration_032"), the way a reader scans for it; terms are the query's words of
two or more characters (or digits), stopwords left out unless nothing else is left;
`_` separates words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import querysyntax
from .textquery import STOPWORDS

SNIPPET_CHARS = 240
_WORD = re.compile(r"[^\W_]+")  # parse_config is two words, as full-text search reads it
ANSI_BOLD, ANSI_RESET = "\x1b[1m", "\x1b[0m"
MARK_OPEN, MARK_CLOSE = "«", "»"


def query_terms(query: str, word: re.Pattern[str] = _WORD) -> list[str]:
    """The words of a query worth looking for, longest first (a longer term wins a word);
    stopwords only when the query has nothing else, as full-text search treats them.
    `word` is what counts as a word (the web page's marks keep `_` inside words). Excluded
    words and field filters of the query syntax are not looked for (querysyntax.py)."""
    query = querysyntax.parse(query).embed_text
    words = {t for t in word.findall(query.lower()) if len(t) > 1 or t.isdigit()}
    content = {t for t in words if t not in STOPWORDS} or words
    return sorted(content, key=lambda t: (-len(t), t))


def term_matches(text: str, terms: Sequence[str], limit: int = 500,
                 word: re.Pattern[str] = _WORD) -> list[tuple[int, int, str]]:
    """(start, end, term) of the words in `text` that start with a term, at most `limit`."""
    found: list[tuple[int, int, str]] = []
    if not terms:
        return found
    for match in word.finditer(text):
        lowered = match.group().lower()
        term = next((t for t in terms if lowered.startswith(t)), None)
        if term is not None:
            found.append((match.start(), match.start() + len(term), term))
            if len(found) >= limit:
                break
    return found


def highlight(text: str, terms: Sequence[str], *, ansi: bool = False) -> str:
    """Mark the matching part of each matching word: ANSI bold, or «term» for plain text."""
    opening, closing = (ANSI_BOLD, ANSI_RESET) if ansi else (MARK_OPEN, MARK_CLOSE)
    out, last = [], 0
    for start, end, _ in term_matches(text, terms, limit=10_000):
        out.append(text[last:start] + opening + text[start:end] + closing)
        last = end
    return "".join(out) + text[last:]


@dataclass(frozen=True, slots=True)
class LineSnippet:
    """Lines `first`..`last` (1-based, in the file when the chunk's first line is known) and the
    line with the most query terms, `best`."""

    first: int
    last: int
    best: int
    lines: tuple[str, ...]


def best_lines(text: str, query: str, *, first_line: int = 1, max_lines: int = 5,
               max_width: int = 160) -> LineSnippet:
    """The window of up to `max_lines` lines holding the most distinct query terms (then the most
    matches), centred on its best line; lines longer than `max_width` are cut around their match."""
    lines = text.split("\n")
    terms = query_terms(query)
    per_line = [term_matches(line, terms) for line in lines]
    best_i = max(range(len(lines)), key=lambda i: (len({t for _, _, t in per_line[i]}), len(per_line[i]), -i))
    if not per_line[best_i]:  # nothing matched (a vector-only hit): the chunk's start
        best_i = next((i for i, line in enumerate(lines) if line.strip()), 0)
    best_key: tuple[int, float, int] | None = None
    start = 0
    span = min(max_lines, len(lines))
    for s in range(max(0, best_i - span + 1), min(best_i, len(lines) - span) + 1):
        window = [m for row in per_line[s:s + span] for m in row]
        key = (len({t for _, _, t in window}), -abs((s + span / 2) - (best_i + 0.5)), len(window))
        if best_key is None or key > best_key:
            best_key, start = key, s
    if not per_line[best_i]:
        start = best_i
    chosen = lines[start:start + span]
    while len(chosen) > 1 and not chosen[-1].strip():
        chosen.pop()
    while len(chosen) > 1 and not chosen[0].strip() and start < best_i:
        chosen.pop(0)
        start += 1
    cut = tuple(_cut(line, per_line[start + i], max_width) for i, line in enumerate(chosen))
    return LineSnippet(first_line + start, first_line + start + len(cut) - 1, first_line + best_i, cut)


def _cut(line: str, matches: Sequence[tuple[int, int, str]], width: int) -> str:
    line = line.rstrip()
    if len(line) <= width:
        return line
    start = max(0, (matches[0][0] if matches else 0) - width // 4)
    end = min(len(line), start + width)
    start = max(0, end - width)
    return ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """A window of about `width` characters of `text` holding the most query terms.

    Whitespace is collapsed; with no match the text's beginning is returned. "…"
    marks a cut at either end.
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    hits = [(pos, term) for pos, _, term in term_matches(flat, query_terms(query))]
    lead = width // 4
    start = 0
    if hits:
        best = (-1, -1)
        for i, (pos, _) in enumerate(hits):
            covered = [t for p, t in hits[i:] if p < pos + width - lead]
            key = (len(set(covered)), len(covered))
            if key > best:
                best, start = key, max(0, pos - lead)
    end = min(len(flat), start + width)
    start = max(0, end - width)
    if start > 0:
        space = flat.find(" ", start, start + 20)
        start = space + 1 if space != -1 else start
    if end < len(flat):
        space = flat.rfind(" ", end - 20, end)
        end = space if space != -1 else end
    return ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")
