"""Path filters as one anchored regular expression both SQLite (our REGEXP) and PostgreSQL (`~`) run. Pure.

A pattern is matched against an item's `metadata.path` (POSIX, relative to the
indexed folder), the way a shell or .gitignore reads it:

- `src/**/*.py`: `**` spans any number of folders (none included), `*` and `?` stay
  within one path segment, `[abc]` is a character class;
- `src/` or `src` (no wildcard): that file, or anything under that folder;
- `*.md` (no `/`): a name matched at any depth.

The regex uses only what both engines read alike: `^ $ . [^/] * ? (?: | )`, bracket
classes and backslash-escaped punctuation.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InvalidFilterError

_SPECIAL = set(".^$+{}()|\\*?[]")
MAX_PATTERNS = 50
MAX_PATTERN_CHARS = 500


def _escape(char: str) -> str:
    return "\\" + char if char in _SPECIAL else char


def _class(pattern: str, i: int) -> tuple[str, int]:
    """A `[...]` class starting at pattern[i]; returns (regex, index after it)."""
    j = i + 1
    negate = j < len(pattern) and pattern[j] in "!^"
    if negate:
        j += 1
    body = []
    first = True
    while j < len(pattern) and (pattern[j] != "]" or first):
        char = pattern[j]
        body.append("\\" + char if char in "\\[]^" else char)
        first = False
        j += 1
    if j >= len(pattern) or not body:
        return "\\[", i + 1  # no closing bracket: a literal "["
    return ("[^/" if negate else "[") + "".join(body) + "]", j + 1


def _normalized(pattern: str) -> str:
    """The pattern relative to the indexed folder: no surrounding blanks, leading `/` or `./`."""
    text = pattern.strip().lstrip("/")
    while text.startswith("./"):
        text = text[2:]
    return text


def glob_regex(pattern: str) -> str:
    """The anchored regex for one pattern (see the module docstring)."""
    if not isinstance(pattern, str) or not pattern.strip() or len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidFilterError(
            f"filter 'path': a pattern is a non-empty string of at most {MAX_PATTERN_CHARS} characters")
    if "\x00" in pattern:
        raise InvalidFilterError("filter 'path': the pattern contains a NUL character")
    text = _normalized(pattern)
    if not any(c in text for c in "*?["):
        folder = text.rstrip("/")
        literal = "".join(_escape(c) for c in folder)
        if not folder:
            return "^.*$"
        return f"^{literal}(?:/.*)?$"
    anywhere = "/" not in text.rstrip("/")
    if text.endswith("/"):
        text += "**"
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if text.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif text.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            piece, i = _class(text, i)
            out.append(piece)
        else:
            out.append(_escape(char))
            i += 1
    body = "".join(out)
    return f"^(?:.*/)?{body}$" if anywhere else f"^{body}$"


def paths_regex(patterns: Sequence[str]) -> str:
    """One regex matching a path that any of `patterns` matches."""
    if not patterns or len(patterns) > MAX_PATTERNS:
        raise InvalidFilterError(f"filter 'path' takes 1 to {MAX_PATTERNS} patterns")
    parts = [glob_regex(p) for p in patterns]
    return parts[0] if len(parts) == 1 else "|".join(f"(?:{p})" for p in parts)


def literal_prefix(pattern: str) -> str:
    """What every path `pattern` matches starts with ("" when it can start anywhere): the
    text before its first wildcard, for an index to find candidates by (PostgreSQL's
    `LIKE 'prefix%'`); the regex still decides. Call after glob_regex accepted it."""
    text = _normalized(pattern)
    if not any(c in text for c in "*?["):
        return text.rstrip("/")
    if "/" not in text.rstrip("/"):
        return ""  # a name matched at any depth
    cut = min(text.index(c) for c in "*?[" if c in text)
    return text[:cut]


def common_prefixes(patterns: Sequence[str]) -> list[str] | None:
    """Each pattern's literal prefix, or None when one of them has none (then no prefix
    narrows the paths)."""
    prefixes = [literal_prefix(p) for p in patterns]
    return prefixes if all(prefixes) else None

