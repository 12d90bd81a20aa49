"""Facet counts over a search's candidate pool: corpus, kind, language and top folders. Pure.

The page shows them beside the hits; a click filters by the value (a folder as a path
filter ending in `/`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..model import Hit

FACET_POOL = 100  # hits counted: the page's candidate pool
MAX_VALUES = 10  # per facet, the most frequent first
MAX_FOLDERS = 8
FOLDER_DEPTH = 4


def _values(counter: Counter[str], limit: int = MAX_VALUES) -> list[dict[str, Any]]:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"value": value, "count": count} for value, count in ranked[:limit]]


def top_folders(paths: Iterable[str], limit: int = MAX_FOLDERS) -> list[dict[str, Any]]:
    """The folders holding the most paths, each as `a/b/` with its count.

    A folder whose paths all sit in one subfolder is left out for that subfolder
    (`code/` with 5 hits all under `code/starlette/` shows as `code/starlette/` only),
    so each value narrows the list. Folders deeper than FOLDER_DEPTH are not counted.
    """
    counts: Counter[str] = Counter()
    for path in paths:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        for depth in range(1, min(len(parts), FOLDER_DEPTH + 1)):
            counts["/".join(parts[:depth]) + "/"] += 1
    children: dict[str, list[str]] = {}
    for folder in counts:
        parent = folder[: folder.rstrip("/").rfind("/") + 1]
        if parent:
            children.setdefault(parent, []).append(folder)
    kept = Counter({f: n for f, n in counts.items()
                    if not any(counts[c] == n for c in children.get(f, ()))})
    return _values(kept, limit)


def facet_counts(hits: Sequence[Hit]) -> dict[str, list[dict[str, Any]]]:
    """{facet: [{value, count}]} for corpus, kind, language and folder; empty facets left out."""
    corpus = Counter(h.corpus for h in hits)
    kind = Counter(h.kind for h in hits if h.kind)
    language = Counter(str(h.metadata["language"]) for h in hits
                       if isinstance(h.metadata.get("language"), str) and h.metadata["language"])
    out = {"corpus": _values(corpus), "kind": _values(kind), "language": _values(language),
           "folder": top_folders(h.path for h in hits if h.path)}
    return {name: values for name, values in out.items() if values}
