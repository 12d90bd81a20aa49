"""Split source code at top-level definitions, so a hit is one function or class. Pure.

Python is parsed with `ast` (exact line ranges, decorators included); other
languages use a line-start regex where one is reliable, and everything else
falls back to a window of lines with overlap, so a definition cut at a window
edge is still whole in one of the two windows.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from .chunk import Chunk, make_chunk, split_lines, split_long

WINDOW_LINES = 60
OVERLAP_LINES = 10
MAX_CODE_CHARS = 3000

Span = tuple[int, int, str | None]  # 0-based start, end exclusive, symbol


def _patterns(*sources: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(s) for s in sources)


_JS = _patterns(
    r"^(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(?P<name>[\w$]+)",
    r"^(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+(?P<name>[\w$]+)",
    r"^(?:export\s+)?(?:const|let|var)\s+(?P<name>[\w$]+)\s*(?::[^=]+)?=\s*(?:async\s+)?"
    r"(?:function\b|\([^)]*\)\s*(?::[^=]+)?=>|[\w$]+\s*=>)",
    r"^(?:export\s+)?(?:declare\s+)?(?:interface|type|enum|namespace)\s+(?P<name>[\w$]+)",
)
_C = _patterns(
    r"^(?:typedef\s+)?(?:struct|union|enum|class|namespace)\s+(?P<name>\w+)[^;]*$",
    r"^(?!(?:if|else|for|while|switch|return|do|case|goto|typedef)\b)[A-Za-z_][\w \t*&:<>,~]*?"
    r"[ \t*&](?P<name>[A-Za-z_~][\w:~]*)\s*\([^;]*$",
)
_JVM = _patterns(
    r"^(?:(?:public|private|protected|internal|abstract|final|sealed|static|open|data|partial|inline)"
    r"\s+)*(?:class|interface|enum|record|object|trait|struct|protocol|extension|fun|func|def)"
    r"\s+(?P<name>\w+)",
)
_DEFINITIONS: dict[str, tuple[re.Pattern[str], ...]] = {
    "python": _patterns(r"^(?:async\s+)?def\s+(?P<name>\w+)", r"^class\s+(?P<name>\w+)"),
    "go": _patterns(r"^func\s+(?:\([^)]*\)\s*)?(?P<name>\w+)", r"^type\s+(?P<name>\w+)"),
    "rust": _patterns(
        r"^(?:pub(?:\([^)]*\))?\s+)?(?:(?:async|unsafe|const|extern\s+\"[^\"]*\")\s+)*"
        r"(?:fn|struct|enum|trait|union|mod|macro_rules!)\s+(?P<name>\w+)",
        r"^(?:unsafe\s+)?impl\b(?P<name>[^{]*)"),
    "javascript": _JS, "typescript": _JS, "c": _C, "cpp": _C,
    "java": _JVM, "kotlin": _JVM, "scala": _JVM, "swift": _JVM, "csharp": _JVM,
    "php": _patterns(r"^(?:(?:abstract|final)\s+)?(?:function|class|interface|trait|enum)\s+(?P<name>\w+)"),
    "ruby": _patterns(r"^(?:def|class|module)\s+(?P<name>[\w.:?!=]+)"),
    "shell": _patterns(r"^(?:function\s+)?(?P<name>[\w.-]+)\s*\(\)", r"^function\s+(?P<name>[\w.-]+)"),
    "sql": _patterns(
        r"(?i)^(?:create|alter)\s+(?:or\s+replace\s+)?(?:temp(?:orary)?\s+)?(?:unique\s+)?"
        r"(?:table|view|materialized\s+view|index|function|procedure|trigger|type|schema|sequence)\s+"
        r"(?:if\s+not\s+exists\s+)?(?P<name>[\w.\"`]+)"),
    "lua": _patterns(r"^(?:local\s+)?function\s+(?P<name>[\w.:]+)"),
    "toml": _patterns(r"^\[+(?P<name>[^\]]+)\]+"),
    "ini": _patterns(r"^\[(?P<name>[^\]]+)\]"),
    "make": _patterns(r"^(?P<name>[\w./%-]+)\s*:(?!=)"),
    "proto": _patterns(r"^(?:message|service|enum)\s+(?P<name>\w+)"),
}

# Comment and attribute lines directly above a definition belong to it.
_HASH = ("#", "@")
_SLASH = ("//", "/*", "*", "@", "#[")
_LEADERS = {"python": _HASH, "ruby": _HASH, "shell": _HASH, "toml": _HASH, "ini": ("#", ";"),
            "make": ("#",), "sql": ("--",), "lua": ("--",), "csharp": (*_SLASH, "[")}


def chunk_code(text: str, language: str, *, window: int = WINDOW_LINES, overlap: int = OVERLAP_LINES,
               max_chars: int = MAX_CODE_CHARS) -> list[Chunk]:
    """Chunks at top-level definitions (heading = symbol name), else line windows with overlap.

    Python: one chunk per top-level def/class (a long class is split into its
    methods, "Class.method"); the code between them (imports, constants, the
    module docstring) is chunked with no heading.
    """
    if not 0 <= overlap < window:
        raise ValueError(f"overlap must be in [0, window), got {overlap} for window {window}")
    lines = split_lines(text)
    spans = _python_spans(text, lines, window + overlap) if language == "python" else None
    if spans is None:
        spans = _regex_spans(lines, language)
    if not spans:
        return line_windows(lines, 0, len(lines), None, window=window, overlap=overlap,
                            max_chars=max_chars)
    out: list[Chunk] = []
    for start, end, symbol in spans:
        if end - start > window + overlap:
            out.extend(line_windows(lines, start, end, symbol, window=window, overlap=overlap,
                                    max_chars=max_chars))
            continue
        chunk = make_chunk(lines, start, end, symbol)
        if chunk is not None:
            out.extend(split_long(chunk, max_chars))
    return out


def line_windows(lines: Sequence[str], start: int, end: int, heading: str | None, *,
                 window: int = WINDOW_LINES, overlap: int = OVERLAP_LINES,
                 max_chars: int = MAX_CODE_CHARS) -> list[Chunk]:
    """Windows of `window` lines, each starting `window - overlap` lines after the previous."""
    out: list[Chunk] = []
    at = start
    while at < end:
        stop = min(at + window, end)
        chunk = make_chunk(lines, at, stop, heading)
        if chunk is not None:
            out.extend(split_long(chunk, max_chars))
        if stop == end:
            break
        at += window - overlap
    return out


def _leading(lines: Sequence[str], at: int, floor: int, leaders: tuple[str, ...]) -> int:
    """Move `at` up over the comment/attribute lines directly above it (not past `floor`)."""
    while at - 1 >= floor and lines[at - 1].strip() and lines[at - 1].lstrip().startswith(leaders):
        at -= 1
    return at


_PY_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _py_start(node: ast.stmt, lines: Sequence[str], floor: int) -> int:
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)]) - 1
    return _leading(lines, first, floor, _HASH)


def _python_spans(text: str, lines: Sequence[str], limit: int) -> list[Span] | None:
    """Spans for top-level defs and the code between them; None when the file does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    spans: list[Span] = []
    cursor = 0
    for node in tree.body:
        if not isinstance(node, _PY_DEFS) or node.end_lineno is None:
            continue
        start, end = _py_start(node, lines, cursor), node.end_lineno
        if start > cursor:
            spans.append((cursor, start, None))
        if isinstance(node, ast.ClassDef) and end - start > limit:
            spans.extend(_class_spans(node, lines, start, end))
        else:
            spans.append((start, end, node.name))
        cursor = end
    if cursor < len(lines):
        spans.append((cursor, len(lines), None))
    return spans


def _class_spans(node: ast.ClassDef, lines: Sequence[str], start: int, end: int) -> list[Span]:
    """A long class as its head (signature, docstring, attributes) and one span per method."""
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not methods:
        return [(start, end, node.name)]
    spans: list[Span] = []
    floor = start + 1  # never above the `class` line
    starts: list[int] = []
    for method in methods:
        starts.append(_py_start(method, lines, floor))
        floor = method.end_lineno or starts[-1] + 1
    spans.append((start, starts[0], node.name))
    for i, method in enumerate(methods):
        stop = starts[i + 1] if i + 1 < len(methods) else end
        spans.append((starts[i], stop, f"{node.name}.{method.name}"))
    return spans


def _regex_spans(lines: Sequence[str], language: str) -> list[Span]:
    """From each definition's first line (with its comments) to the next definition."""
    patterns = _DEFINITIONS.get(language)
    if not patterns:
        return []
    leaders = _LEADERS.get(language, _SLASH)
    found: list[tuple[int, str]] = []
    floor = 0
    for i, line in enumerate(lines):
        for pattern in patterns:
            match = pattern.match(line)
            if match:
                found.append((_leading(lines, i, floor, leaders), match.group("name").strip()))
                floor = i + 1
                break
    if not found:
        return []
    spans: list[Span] = [(0, found[0][0], None)] if found[0][0] > 0 else []
    for n, (start, name) in enumerate(found):
        stop = found[n + 1][0] if n + 1 < len(found) else len(lines)
        spans.append((start, stop, name or None))
    return spans
