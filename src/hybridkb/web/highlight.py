"""Where a query's terms occur in a snippet, as character spans the page wraps in <mark>. Pure.

The page gets spans, not HTML: it builds the marks with DOM text nodes, so no
stored text is ever parsed as markup.
"""

from __future__ import annotations

import re
from typing import Any

from ..textquery import STOPWORDS

_WORD = re.compile(r"\w+")


def query_terms(query: str) -> list[str]:
    """Lower-cased query words worth marking (single letters only when digits; stopwords
    only when nothing else is left, as full-text search treats them), longest first."""
    words = {t for t in _WORD.findall(query.lower()) if len(t) > 1 or t.isdigit()}
    terms = {t for t in words if t not in STOPWORDS} or words
    return sorted(terms, key=lambda t: (-len(t), t))


def term_spans(text: str, query: str, limit: int = 200) -> list[tuple[int, int]]:
    """(start, end) of each word in `text` that starts with a query term (case-insensitive).

    Prefix matching follows the snippet window: "migrat" marks "migration_032".
    At most `limit` spans, in text order, never overlapping.
    """
    terms = query_terms(query)
    if not terms:
        return []
    spans: list[tuple[int, int]] = []
    for match in _WORD.finditer(text):
        word = match.group().lower()
        term = next((t for t in terms if word.startswith(t)), None)
        if term is not None:
            spans.append((match.start(), match.start() + len(term)))
            if len(spans) >= limit:
                break
    return spans


def location(metadata: dict[str, Any]) -> str | None:
    """`path:line` for an item that records where it came from (e.g. `hybridkb index` chunks)."""
    path = metadata.get("path")
    if not isinstance(path, str) or not path:
        return None
    line = metadata.get("start_line")
    if isinstance(line, int) and not isinstance(line, bool) and line > 0:
        return f"{path}:{line}"
    return path
