"""Find the files under a folder worth indexing, the way git would see them.

`.gitignore` files apply at every level (a deeper file overrides a shallower
one, as in git), including those between the enclosing repository's root and
the folder; ignored directories are never entered. Version-control folders,
node_modules and virtualenvs are always skipped, symlinks are not followed.
Nothing here raises for one bad entry: a file or folder that cannot be read, or
whose name is not valid UTF-8, is listed in `skipped` with the reason.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

from .languages import (
    DATA_LANGUAGES,
    MAX_DATA_BYTES,
    TEXT,
    VENDORED_DIRS,
    FileType,
    classify,
    generated_reason,
)

MAX_FILE_BYTES = 1_000_000
BINARY_SNIFF_BYTES = 8192
ALWAYS_SKIP = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
                         ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".eggs"})


@dataclass(frozen=True, slots=True)
class SourceFile:
    rel: str  # POSIX path relative to the indexed folder
    path: Path
    type: FileType
    chosen: bool = False  # named by --include (or given alone): no data/minified skip


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str


@dataclass(slots=True)
class WalkResult:
    files: list[SourceFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Ignore:
    """One ignore file: its patterns see paths relative to the folder that holds it."""

    spec: GitIgnoreSpec
    strip: int  # characters of our root-relative path to drop (a deeper .gitignore)
    lead: str  # prefix to add (a .gitignore above the root)

    def check(self, rel: str) -> bool | None:
        return self.spec.check_file(self.lead + rel[self.strip:]).include


def _ignored(chain: Sequence[_Ignore], rel: str) -> bool:
    for ignore in reversed(chain):  # the deepest file that has an opinion wins
        verdict = ignore.check(rel)
        if verdict is not None:
            return verdict
    return False


def _exists(path: Path, *, is_file: bool = False) -> bool:
    """Path.exists / is_file that says False instead of raising (e.g. Permission denied)."""
    try:
        return path.is_file() if is_file else path.exists()
    except OSError:
        return False


def shown(rel: str) -> str:
    """A path as text that can be printed and stored (undecodable name bytes escaped)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(rel).decode("utf-8", "backslashreplace")
    return rel


def _bad_name(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _read_spec(path: Path) -> GitIgnoreSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return GitIgnoreSpec.from_lines(lines)


def _outer_ignores(root: Path) -> list[_Ignore]:
    """Ignore files from the enclosing repository's root down to (not including) `root`."""
    parents = [root, *root.parents]
    repo = next((p for p in parents if _exists(p / ".git")), None)
    if repo is None:
        return []
    chain: list[_Ignore] = []
    exclude = _read_spec(repo / ".git" / "info" / "exclude")
    lead_of_root = root.relative_to(repo).as_posix()
    if exclude is not None:
        chain.append(_Ignore(exclude, 0, f"{lead_of_root}/" if lead_of_root != "." else ""))
    for folder in reversed(parents[1:parents.index(repo) + 1]):
        spec = _read_spec(folder / ".gitignore")
        if spec is not None:
            chain.append(_Ignore(spec, 0, root.relative_to(folder).as_posix() + "/"))
    return chain


def _spec(patterns: Iterable[str]) -> GitIgnoreSpec | None:
    lines = [p for p in patterns if p.strip()]
    return GitIgnoreSpec.from_lines(lines) if lines else None


def find_files(root: Path, *, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> WalkResult:
    """Indexable files under `root`, sorted by path; `include`/`exclude` are gitignore-style globs.

    A file matching an `include` glob is indexed whatever its extension (as text when
    unknown) and is never skipped as data, generated or vendored.
    """
    root = root.resolve()
    only, never = _spec(include), _spec(exclude)
    result = WalkResult()
    if root.is_file():
        _consider_file(root, root.name, (), only, never, result, explicit=True)
        return result
    stack: list[tuple[Path, str, tuple[_Ignore, ...]]] = [(root, "", tuple(_outer_ignores(root)))]
    while stack:
        folder, prefix, chain = stack.pop()
        if _exists(folder / ".gitignore", is_file=True):
            spec = _read_spec(folder / ".gitignore")
            if spec is not None:
                chain = (*chain, _Ignore(spec, len(prefix), ""))
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            result.skipped.append(Skipped(prefix or ".", f"cannot list: {exc.strerror or exc}"))
            continue
        subfolders = []
        for entry in entries:
            rel = prefix + entry.name
            try:
                if entry.is_symlink():
                    continue
                is_dir, is_file = entry.is_dir(), entry.is_file()
            except OSError as exc:
                result.skipped.append(Skipped(shown(rel), f"cannot read: {exc.strerror or exc}"))
                continue
            if is_dir:
                if (entry.name in ALWAYS_SKIP or _exists(Path(entry.path) / "pyvenv.cfg")
                        or _ignored(chain, rel + "/") or (never and never.match_file(rel + "/"))):
                    continue
                if entry.name in VENDORED_DIRS and only is None:  # with --include, its globs decide
                    result.skipped.append(Skipped(shown(rel) + "/", "vendored folder"))
                    continue
                if _bad_name(rel):
                    result.skipped.append(Skipped(shown(rel) + "/", "folder name is not valid UTF-8"))
                    continue
                subfolders.append((Path(entry.path), rel + "/", chain))
            elif is_file:
                _consider_file(Path(entry.path), rel, chain, only, never, result)
        stack.extend(reversed(subfolders))
    result.files.sort(key=lambda f: f.rel)
    return result


def _consider_file(path: Path, rel: str, chain: Sequence[_Ignore], only: GitIgnoreSpec | None,
                   never: GitIgnoreSpec | None, result: WalkResult, *, explicit: bool = False) -> None:
    if _ignored(chain, rel) or (never and never.match_file(rel)):
        return
    chosen = explicit or bool(only and only.match_file(rel))
    if only and not chosen:
        return
    reason = None if chosen else generated_reason(path.name)
    file_type = classify(path.name) or (TEXT if chosen else None)
    if file_type is None and reason is None:
        return
    if _bad_name(rel):
        result.skipped.append(Skipped(shown(rel), "file name is not valid UTF-8"))
        return
    if reason or file_type is None:
        result.skipped.append(Skipped(rel, reason or "unknown type"))
        return
    try:
        size = path.stat().st_size
    except OSError as exc:
        result.skipped.append(Skipped(rel, f"cannot read: {exc.strerror or exc}"))
        return
    if size > MAX_FILE_BYTES:
        result.skipped.append(Skipped(rel, f"larger than {MAX_FILE_BYTES // 1_000_000} MB"))
        return
    if not chosen and file_type.language in DATA_LANGUAGES and size > MAX_DATA_BYTES:
        result.skipped.append(Skipped(
            rel, f"data file ({file_type.language.upper()}, {size // 1000} kB; --include it to index)"))
        return
    result.files.append(SourceFile(rel, path, file_type, chosen))


class Unindexable(Exception):
    """A file that looked indexable by its name but is not (binary, grown too large)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    text: str
    digest: str  # sha256 of the bytes on disk
    replaced: bool  # True when the bytes were not valid UTF-8 and some were replaced


def load(path: Path) -> Loaded:
    """Read a file as text. Raises Unindexable for binary or oversized content, OSError as usual."""
    data = path.read_bytes()
    if len(data) > MAX_FILE_BYTES:
        raise Unindexable(f"larger than {MAX_FILE_BYTES // 1_000_000} MB")
    nul = data.find(b"\x00")
    if nul != -1:
        raise Unindexable("binary (NUL byte)" if nul < BINARY_SNIFF_BYTES
                          else f"binary (NUL byte at offset {nul})")
    digest = hashlib.sha256(data).hexdigest()
    try:
        return Loaded(data.decode("utf-8-sig"), digest, False)
    except UnicodeDecodeError:
        return Loaded(data.decode("utf-8", errors="replace"), digest, True)
