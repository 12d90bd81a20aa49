"""Near-duplicate collapse over a ranked list. Pure.

Token-set Jaccard similarity; the best-ranked copy survives and the others are
returned as its alternates. A length filter (|A|/|B| >= threshold is necessary
for Jaccard >= threshold) keeps comparisons few on long candidate lists.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

DEFAULT_THRESHOLD = 0.90
_WORD = re.compile(r"\w+")


def tokens(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def collapse(
    ranked: Sequence[tuple[str, str]], threshold: float = DEFAULT_THRESHOLD,
) -> tuple[list[str], dict[str, list[str]]]:
    """Collapse near-duplicates in a best-first list of (id, text).

    Returns the surviving ids in order and, per survivor, the ids it absorbed.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"dedup threshold must be in (0, 1], got {threshold}")
    kept: list[str] = []
    absorbed: dict[str, list[str]] = {}
    by_size: list[tuple[int, int]] = []  # (token count, index into kept_sets), sorted
    kept_sets: list[tuple[str, frozenset[str]]] = []
    seen: set[str] = set()
    for doc_id, text in ranked:
        if doc_id in seen:
            continue
        seen.add(doc_id)
        toks = tokens(text)
        n = len(toks)
        lo = bisect.bisect_left(by_size, (int(n * threshold), -1))
        hi = bisect.bisect_right(by_size, (int(n / threshold) + 1, len(kept_sets)))
        match = None
        for _, idx in by_size[lo:hi]:
            other_id, other = kept_sets[idx]
            if jaccard(toks, other) >= threshold and (match is None or idx < match[0]):
                match = (idx, other_id)
        if match is not None:
            absorbed.setdefault(match[1], []).append(doc_id)
            continue
        kept.append(doc_id)
        bisect.insort(by_size, (n, len(kept_sets)))
        kept_sets.append((doc_id, toks))
    return kept, absorbed
