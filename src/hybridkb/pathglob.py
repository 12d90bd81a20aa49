"""Path filters as one anchored regular expression both SQLite (our REGEXP) and PostgreSQL (`~`) run. Pure.

A pattern is matched against an item's `metadata.path` (POSIX, relative to the
indexed folder), the way a shell or .gitignore reads it:

- `src/**/*.py`: `**` spans any number of folders (none included), `*` and `?` stay
  within one path segment, `[abc]` is a character class;
- `src/pkg/`, `src/pkg` or `docs/` (no wildcard): that file, or anything under that folder;
- `cors.py`, `src` or `*.md` (no `/` at all): a name matched at any depth; a leading `/`
  or `./` anchors it at the indexed folder (`/src`: only the top one).

`located` reads a pattern as a place on disk instead (an absolute path, or one relative
to where a command stands) and rewrites it relative to each indexed folder holding it.

The regex uses only what both engines read alike: `^ $ . [^/] * ? (?: | )`, bracket
classes and backslash-escaped punctuation.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence

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


def _anywhere(pattern: str) -> bool:
    """A bare name (no `/` at all) matches at any depth; `docs/` is the top folder (and
    keeps a literal prefix for an index to narrow by)."""
    return "/" not in pattern.strip()


def glob_regex(pattern: str) -> str:
    """The anchored regex for one pattern (see the module docstring)."""
    if not isinstance(pattern, str) or not pattern.strip() or len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidFilterError(
            f"filter 'path': a pattern is a non-empty string of at most {MAX_PATTERN_CHARS} characters")
    if "\x00" in pattern:
        raise InvalidFilterError("filter 'path': the pattern contains a NUL character")
    text = _normalized(pattern)
    anywhere = _anywhere(pattern)
    if not any(c in text for c in "*?["):
        folder = text.rstrip("/")
        literal = "".join(_escape(c) for c in folder)
        if not folder:
            return "^.*$"
        return f"^(?:.*/)?{literal}(?:/.*)?$" if anywhere else f"^{literal}(?:/.*)?$"
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
    if _anywhere(pattern):
        return ""  # a name matched at any depth
    if not any(c in text for c in "*?["):
        return text.rstrip("/")
    cut = min(text.index(c) for c in "*?[" if c in text)
    return text[:cut]


def common_prefixes(patterns: Sequence[str]) -> list[str] | None:
    """Each pattern's literal prefix, or None when one of them has none (then no prefix
    narrows the paths)."""
    prefixes = [literal_prefix(p) for p in patterns]
    return prefixes if all(prefixes) else None



def _split(path: str) -> tuple[str, str]:
    """(the leading folders without a wildcard, the rest): `/a/b/**/*.py` -> (`/a/b`, `**/*.py`)."""
    parts = path.split("/")
    cut = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    return "/".join(parts[:cut]), "/".join(parts[cut:])


def located(pattern: str, roots: Mapping[str, str], cwd: str | None = None,
            exists: Callable[[str], bool] | None = None) -> dict[str, str]:
    """`pattern` read as a place on disk: an absolute path, or (given `cwd`) one with a folder
    in it relative to where a command stands, as the CLI prints `path:line` (only where
    `exists` says that place is there, when given: else it is read as usual). For each
    corpus whose indexed folder (`roots`: corpus -> absolute folder, or the one file it
    indexed) holds that place, the pattern relative to that folder, anchored there; {} when
    it lies in none of them (a bare name never is: it matches at any depth).
    Only the folders before the first wildcard are placed: `/w/code/**/*.py` -> `/**/*.py`."""
    text = pattern.strip()
    relative = not text.startswith("/")
    if relative:
        if cwd is None or not cwd.startswith("/") or _anywhere(text):
            return {}
        text = posixpath.join(cwd, text)
    literal, rest = _split(text)
    place = posixpath.normpath(literal or "/")
    if relative and exists is not None and not exists(place):
        return {}
    out: dict[str, str] = {}
    for corpus, root in roots.items():
        root = posixpath.normpath(root)
        if place == root:
            rel = ""
        elif place.startswith(root.rstrip("/") + "/"):
            rel = place[len(root.rstrip("/")) + 1:]
        else:
            continue
        if rest:
            out[corpus] = f"/{rel}/{rest}" if rel else f"/{rest}"
        elif rel:
            out[corpus] = f"/{rel}/" if text.endswith("/") else f"/{rel}"
        else:
            out[corpus] = "**"  # the indexed folder itself: every file in it
    return out
