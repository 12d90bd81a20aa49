"""Where a query's terms occur in a snippet, as character spans the page wraps in <mark>. Pure.

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


def location(metadata: dict[str, Any]) -> str | None:
    """`path:line` for an item that records where it came from (e.g. `hybridkb index` chunks)."""
    path = metadata.get("path")
    if not isinstance(path, str) or not path:
        return None
    line = metadata.get("start_line")
    if isinstance(line, int) and not isinstance(line, bool) and line > 0:
        return f"{path}:{line}"
    return path
