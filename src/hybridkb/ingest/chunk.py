"""Split prose into chunks worth retrieving on their own. Pure: strings in, Chunks out.

A chunk is a section (Markdown) or a run of paragraphs (text) small enough that a
hit points at the passage, not at the whole file; ~1500 characters keeps a chunk
inside what a small embedding model reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_CHARS = 1500

Span = tuple[int, int]  # 0-based line indexes, end exclusive


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a file: its text, the heading path or symbol it sits under, 1-based lines."""

    text: str
    heading: str | None
    start_line: int
    end_line: int


def split_lines(text: str) -> list[str]:
    """Lines with any newline convention, numbered as an editor numbers them."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def make_chunk(lines: Sequence[str], start: int, end: int, heading: str | None) -> Chunk | None:
    """lines[start:end] without blank lines at either edge; None when nothing is left."""
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    if start >= end:
        return None
    return Chunk("\n".join(lines[start:end]), heading, start + 1, end)


def split_long(chunk: Chunk, max_chars: int) -> list[Chunk]:
    """Cut an over-long chunk at line breaks (and a single over-long line every max_chars)."""
    if len(chunk.text) <= max_chars:
        return [chunk]
    lines = chunk.text.split("\n")
    base = chunk.start_line - 1
    out: list[Chunk] = []

    def emit(start: int, end: int) -> None:
        piece = make_chunk(lines, start, end, chunk.heading)
        if piece is not None:
            out.append(Chunk(piece.text, piece.heading, piece.start_line + base, piece.end_line + base))

    start, size = 0, 0
    for i, line in enumerate(lines):
        if len(line) > max_chars:
            emit(start, i)
            out.extend(Chunk(line[j:j + max_chars], chunk.heading, base + i + 1, base + i + 1)
                       for j in range(0, len(line), max_chars) if line[j:j + max_chars].strip())
            start, size = i + 1, 0
            continue
        if i > start and size + len(line) + 1 > max_chars:
            emit(start, i)
            start, size = i, 0
        size += len(line) + 1
    emit(start, len(lines))
    return out


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _fence_closes(line: str, opener: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(opener) and set(stripped) == {opener[0]}


def blocks(lines: Sequence[str], start: int, end: int) -> list[Span]:
    """Paragraphs: runs of non-blank lines. A fenced code block is never cut at its blank lines."""
    out: list[Span] = []
    first: int | None = None
    fence: str | None = None
    for i in range(start, end):
        line = lines[i]
        if fence is not None:
            if _fence_closes(line, fence):
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
        if line.strip():
            if first is None:
                first = i
        elif first is not None:
            out.append((first, i))
            first = None
    if first is not None:
        out.append((first, end))
    return out


def pack(lines: Sequence[str], spans: Sequence[Span], heading: str | None,
         max_chars: int = MAX_CHARS) -> list[Chunk]:
    """Join consecutive paragraphs into chunks of at most max_chars (one long paragraph is cut)."""
    out: list[Chunk] = []
    group: list[Span] = []
    size = 0

    def flush() -> None:
        if group:
            chunk = make_chunk(lines, group[0][0], group[-1][1], heading)
            if chunk is not None:
                out.extend(split_long(chunk, max_chars))
            group.clear()

    for span in spans:
        length = sum(len(lines[i]) + 1 for i in range(*span))
        gap = span[0] - group[-1][1] if group else 0  # the blank lines between paragraphs
        if group and size + gap + length > max_chars:
            flush()
            size, gap = 0, 0
        group.append(span)
        size += gap + length
    flush()
    return out


def chunk_text(text: str, *, max_chars: int = MAX_CHARS) -> list[Chunk]:
    """Plain text as runs of whole paragraphs. No overlap: a paragraph break is a natural seam."""
    lines = split_lines(text)
    return pack(lines, blocks(lines, 0, len(lines)), None, max_chars)


# -- Markdown --------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-{2,})[ \t]*$")
_NOT_A_TITLE = re.compile(r"^\s*(?:[-*+>|]|\d+[.)]\s|#|`{3}|~{3})")


@dataclass(frozen=True, slots=True)
class _Heading:
    line: int  # first line of the heading (the text line of a setext heading)
    size: int  # lines it occupies
    level: int
    title: str


def _front_matter_end(lines: Sequence[str]) -> int:
    """Index after a leading YAML `---` block, so its `---` lines are not taken for headings."""
    if not lines or lines[0].strip() != "---":
        return 0
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return i + 1
    return 0


def _headings(lines: Sequence[str]) -> list[_Heading]:
    found: list[_Heading] = []
    fence: str | None = None
    start = _front_matter_end(lines)
    for i in range(start, len(lines)):
        line = lines[i]
        if fence is not None:
            if _fence_closes(line, fence):
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
            continue
        atx = _ATX.match(line)
        if atx:
            found.append(_Heading(i, 1, len(atx.group(1)), (atx.group(2) or "").strip()))
            continue
        setext = _SETEXT.match(line)
        # Only a one-line paragraph becomes a setext title; anything else is a rule or a table.
        after_heading = bool(found) and found[-1].line + found[-1].size == i - 1
        if (setext and i - 1 >= start and lines[i - 1].strip() and not _NOT_A_TITLE.match(lines[i - 1])
                and (i - 2 < start or not lines[i - 2].strip() or after_heading)):
            level = 1 if setext.group(1).startswith("=") else 2
            found.append(_Heading(i - 1, 2, level, lines[i - 1].strip()))
    return found


def chunk_markdown(text: str, *, max_chars: int = MAX_CHARS) -> list[Chunk]:
    """One chunk per section, headed by its heading path ("Guide > Install"); long ones by paragraphs.

    Text before the first heading is a chunk with no heading. A heading with no body
    of its own is a chunk of its heading lines, so its words are found, unless a deeper
    heading follows it at once: that child's chunks carry it in their heading path.
    """
    lines = split_lines(text)
    heads = _headings(lines)
    out: list[Chunk] = []
    first = heads[0].line if heads else len(lines)
    out.extend(pack(lines, blocks(lines, 0, first), None, max_chars))
    stack: list[tuple[int, str]] = []
    for n, head in enumerate(heads):
        while stack and stack[-1][0] >= head.level:
            stack.pop()
        stack.append((head.level, head.title))
        path = " > ".join(title for _, title in stack if title) or None
        end = heads[n + 1].line if n + 1 < len(heads) else len(lines)
        if not any(lines[i].strip() for i in range(head.line + head.size, end)):
            child = n + 1 < len(heads) and heads[n + 1].level > head.level
            if not child and head.title:
                only = Chunk("\n".join(lines[head.line:head.line + head.size]), path,
                             head.line + 1, head.line + head.size)
                out.extend(split_long(only, max_chars))
            continue
        whole = make_chunk(lines, head.line, end, path)
        if whole is not None and len(whole.text) <= max_chars:
            out.append(whole)
        else:
            out.extend(pack(lines, blocks(lines, head.line, end), path, max_chars))
    return out
