"""A hit's snippet for the page (its lines kept), and where the query's terms occur in it as
character spans the page wraps in <mark>. Pure.

The page gets spans, not HTML: it builds the marks with DOM text nodes, so no
stored text is ever parsed as markup.
"""

from __future__ import annotations

import re
from typing import Any

from .. import snippets

_WORD = re.compile(r"\w+")  # unlike the CLI's snippets, `parse_config` is one word here


def query_terms(query: str) -> list[str]:
    """Lower-cased query words worth marking (single letters only when digits; stopwords
    only when nothing else is left, as full-text search treats them), longest first."""
    return snippets.query_terms(query, word=_WORD)


def term_spans(text: str, query: str, limit: int = 200) -> list[tuple[int, int]]:
    """(start, end) of each word in `text` that starts with a query term (case-insensitive).

    Prefix matching follows the snippet window: "migrat" marks "migration_032".
    At most `limit` spans, in text order, never overlapping.
    """
    matches = snippets.term_matches(text, query_terms(query), limit, word=_WORD)
    return [(start, end) for start, end, _ in matches]


SNIPPET_CHARS = 240
SNIPPET_LINES = 8  # a file chunk's window
NOTE_LINES = 6  # an item of several lines without a place in a file
LINE_CHARS = 200


def hit_snippet(text: str, query: str, start_line: int | None) -> tuple[str, int | None]:
    """The part of `text` to show, its line breaks kept, and the file line it starts at.

    A chunk of a file (its first line known) shows its best lines, numbered from that line;
    other text of several lines its best lines without numbers; one long line a window of
    about SNIPPET_CHARS characters.
    """
    if start_line is not None:
        shown = snippets.best_lines(text, query, first_line=start_line, max_lines=SNIPPET_LINES,
                                    max_width=LINE_CHARS)
        return "\n".join(shown.lines), shown.first
    if "\n" in text.strip():
        shown = snippets.best_lines(text, query, max_lines=NOTE_LINES, max_width=LINE_CHARS)
        return "\n".join(shown.lines), None
    return snippets.snippet(text, query, SNIPPET_CHARS), None


def location(metadata: dict[str, Any]) -> str | None:
    """`path:line` for an item that records where it came from (e.g. `hybridkb index` chunks)."""
    path = metadata.get("path")
    if not isinstance(path, str) or not path:
        return None
    line = metadata.get("start_line")
    if isinstance(line, int) and not isinstance(line, bool) and line > 0:
        return f"{path}:{line}"
    return path
