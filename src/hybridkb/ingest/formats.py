"""Files that are not plain text on disk: HTML and Jupyter notebooks, turned into chunks. Pure.

HTML keeps its line numbers: each piece of text stays on the source line it came
from (markup lines become blank), so `path:line` of a hit points into the file.
Notebooks become one or more chunks per cell: Markdown cells chunked as Markdown,
code cells as code in the notebook's language; lines count within the cell.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

from .chunk import Chunk, chunk_markdown, chunk_text, split_lines
from .code import chunk_code

_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "svg"})
_BREAK_TAGS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
                         "section", "article", "table", "blockquote", "hr", "dt", "dd"})


class NotebookError(ValueError):
    """A .ipynb file that is not a notebook."""


class _Extractor(HTMLParser):
    def __init__(self, line_count: int) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[list[str]] = [[] for _ in range(line_count + 1)]
        self.skip = 0
        self.title: str | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self.skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _BREAK_TAGS:
            self._gap()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in _BREAK_TAGS:
            self._gap()

    def _gap(self) -> None:
        line = self.getpos()[0] - 1
        if 0 <= line < len(self.lines) and self.lines[line] and self.lines[line][-1] != " ":
            self.lines[line].append(" ")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self._in_title:
            self.title = (self.title or "") + data.strip()
            return
        first = self.getpos()[0] - 1
        for offset, piece in enumerate(split_lines(data)):
            line = min(first + offset, len(self.lines) - 1)
            self.lines[line].append(piece)


def html_text(source: str) -> str:
    """The visible text of an HTML document, line for line with the source."""
    count = len(split_lines(source))
    parser = _Extractor(count)
    parser.feed(source)
    parser.close()
    out = [" ".join("".join(parts).split()) for parts in parser.lines[:count]]
    return "\n".join(out)


def chunk_html(source: str) -> list[Chunk]:
    return chunk_text(html_text(source))


def notebook_cells(source: str) -> tuple[str, list[tuple[str, str]]]:
    """A notebook's language and its cells as (cell_type, text) pairs."""
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not a notebook: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells")
    meta = data.get("metadata")
    info = meta.get("language_info") if isinstance(meta, dict) else None
    language = str(info.get("name") or "python").lower() if isinstance(info, dict) else "python"
    cells = []
    for cell in data["cells"]:
        if not isinstance(cell, dict):
            continue
        text = cell.get("source", "")
        if isinstance(text, list):
            text = "".join(str(part) for part in text)
        if isinstance(text, str) and text.strip():
            cells.append((str(cell.get("cell_type", "code")), text))
    return language, cells


def chunk_notebook(source: str) -> list[Chunk]:
    """Chunks per cell, headed `cell N` (or the cell's own Markdown heading path)."""
    language, cells = notebook_cells(source)
    out: list[Chunk] = []
    for number, (kind, text) in enumerate(cells, start=1):
        label = f"cell {number}"
        if kind == "markdown":
            pieces = chunk_markdown(text)
        elif kind == "code":
            pieces = chunk_code(text, language)
        else:
            pieces = chunk_text(text)
        for piece in pieces:
            heading = f"{label} > {piece.heading}" if piece.heading else label
            out.append(Chunk(piece.text, heading, piece.start_line, piece.end_line))
    return out
