"""The lines around an item that comes from a file: read from the file, or pieced from its
neighbouring chunks in the store.

The file is read only when it is the one `hybridkb index` read: under the folder the
corpus mirrors (its recorded root, symlinks resolved) and with the sha256 the item
records (`metadata.file_hash`). A caller who writes an item with a made-up path can
therefore never read a file the index did not take in, and a file changed since it
was indexed (its lines moved) gives way to the store's chunks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..ingest.walk import MAX_FILE_BYTES, Unindexable, load
from ..model import Item
from ..store import KnowledgeBase

MAX_AROUND = 200
NEIGHBOUR_SCAN = 2000  # chunks of one file read at most when piecing lines from the store


def _line(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _span(item: Item) -> tuple[str, int, int] | None:
    path = item.metadata.get("path")
    start = _line(item.metadata.get("start_line"))
    if not isinstance(path, str) or not path or start is None:
        return None
    end = _line(item.metadata.get("end_line")) or start + max(0, item.text.count("\n"))
    return path, start, max(start, end)


def _file_lines(kb: KnowledgeBase, item: Item, path: str) -> list[str] | None:
    root = kb.corpus_settings(item.corpus).get("root")
    digest = item.metadata.get("file_hash")
    if not isinstance(root, str) or not root or not isinstance(digest, str):
        return None
    try:
        base = Path(root).resolve()
        full = (base / path).resolve() if base.is_dir() else base
        if base.is_dir() and not full.is_relative_to(base):
            return None
        if not full.is_file() or full.stat().st_size > MAX_FILE_BYTES:
            return None  # grown past what index reads: not the indexed file, and not read whole
        loaded = load(full)
    except (OSError, ValueError, Unindexable):
        return None
    if loaded.digest != digest:
        return None
    lines = loaded.text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no line of its own
    return lines


def _store_lines(kb: KnowledgeBase, item: Item, path: str) -> dict[int, str]:
    """Line number -> text from the item's file's chunks in the store (overlaps agree)."""
    lines: dict[int, str] = {}
    filters = {"metadata": {"path": path}}
    for n, other in enumerate(kb.iter_items(corpora=[item.corpus], filters=filters)):
        if n >= NEIGHBOUR_SCAN:
            break
        start = _line(other.metadata.get("start_line"))
        if start is None:
            continue
        for i, text in enumerate(other.text.split("\n")):
            lines.setdefault(start + i, text)
    return lines


def item_context(kb: KnowledgeBase, item: Item, around: int) -> dict[str, Any] | None:
    """`around` lines before and after the item's own, or None when it has no place in a file.

    {"source": "file" | "store", "path", "start_line", "end_line" (the item's),
    "first" (the number of lines[0]), "lines"}. In a "store" context a line no chunk holds
    (chunks leave out the blank lines between them) is null.
    """
    span = _span(item)
    if span is None or around < 0:
        return None
    path, start, end = span
    around = min(around, MAX_AROUND)
    file_lines = _file_lines(kb, item, path)
    if file_lines is not None and end <= len(file_lines):
        first = max(1, start - around)
        last = min(len(file_lines), end + around)
        return {"source": "file", "path": path, "start_line": start, "end_line": end,
                "first": first, "lines": file_lines[first - 1:last]}
    known = _store_lines(kb, item, path)
    for i, text in enumerate(item.text.split("\n")):
        known[start + i] = text  # the item's own lines, whatever its neighbours hold
    window = [n for n in known if start - around <= n <= end + around]
    first, last = min(window), max(window)
    return {"source": "store", "path": path, "start_line": start, "end_line": end, "first": first,
            "lines": [known.get(n) for n in range(first, last + 1)]}
