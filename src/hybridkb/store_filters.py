"""A search's path, kind and language filters read against the store it runs on.

Every face (Python, CLI, MCP, REST, the page) hands its filters to `KnowledgeBase.search`,
so one reading holds for all of them:

- a path pattern that names a place on disk (an absolute path, or one relative to the
  working directory that exists there, as the CLI prints `path:line`) and lies inside a
  folder a corpus indexed is rewritten relative to that folder (pathglob.located); when
  every pattern is placed so, the search covers only those corpora. Any other pattern is
  read relative to the indexed folders (a folder, a glob, a bare file name at any depth).
- a kind or language no item of the searched corpora has is an error with the closest
  known values, as an unknown corpus is (where they hold any language at all; a kind is
  known when stored or one of model.KNOWN_KINDS): asked only once a search found nothing,
  so a search that finds something pays nothing for it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from . import pathglob
from .errors import InvalidFilterError
from .model import KNOWN_KINDS, Filters


class Reading:
    """One search's filters read against the store: `place` (pipeline.run calls it once the
    query's own `path:`, `kind:`... joined them), then `check` with the hits found.
    `settings(corpus)` gives a corpus's settings, `counts(key, corpora)` its values' counts."""

    def __init__(self, settings: Callable[[str], Mapping[str, Any]],
                 counts: Callable[[str, Sequence[str]], Mapping[str, int]]) -> None:
        self.settings, self.counts = settings, counts
        self.filters: Filters | None = None
        self.corpora: list[str] = []

    def place(self, filters: Filters, names: Sequence[str]) -> tuple[Filters, list[str]]:
        self.filters, self.corpora = placed(filters, names, self.settings)
        return self.filters, self.corpora

    def check(self, hits: Sequence[object]) -> None:
        if not hits and self.filters is not None:
            check_known(self.filters, lambda key: self.counts(key, self.corpora))


def placed(filters: Filters, names: Sequence[str], settings: Callable[[str], Mapping[str, Any]],
           *, cwd: str | None = None) -> tuple[Filters, list[str]]:
    """(`filters` with its path patterns placed in the corpora's indexed folders, the corpora
    to search). `settings(corpus)` gives a corpus's settings (its "root": the indexed folder)."""
    if not filters.paths:
        return filters, list(names)
    roots = {c: root for c in names if isinstance(root := settings(c).get("root"), str)}
    if not roots:
        return filters, list(names)
    here = cwd if cwd is not None else _cwd()
    patterns: list[str] = []
    holders: set[str] = set()
    everywhere = False
    for pattern in filters.paths:
        spots = pathglob.located(pattern, roots, here, exists=os.path.exists)
        if spots:
            patterns.extend(spots.values())
            holders.update(spots)
        else:
            patterns.append(pattern)
            everywhere = True
    kept = list(names) if everywhere else [n for n in names if n in holders]
    return replace(filters, paths=tuple(dict.fromkeys(patterns))), kept


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed
        return None


def check_known(filters: Filters, counts: Callable[[str], Mapping[str, int]]) -> None:
    """Raise InvalidFilterError when every kind (or every language) a filter asks for is one
    no searched item has; `counts(key)` gives the values the corpora hold ("kind", "language")."""
    if filters.kinds:
        _known("kind", filters.kinds, [*counts("kind"), *KNOWN_KINDS])
    if filters.languages:
        _known("language", filters.languages, [v.lower() for v in counts("language")])


def _known(key: str, asked: Iterable[str], known: Sequence[str]) -> None:
    values = set(known)
    unknown = [v for v in dict.fromkeys(asked) if v not in values]
    if not values or not unknown or len(unknown) < len(set(asked)):
        return  # nothing to compare with (no indexed file yet), or one value is known
    guesses = [g for v in unknown for g in difflib.get_close_matches(v, sorted(values), n=2, cutoff=0.6)]
    asked_text = ", ".join(map(repr, unknown))
    hint = f" (did you mean {' or '.join(map(repr, dict.fromkeys(guesses)))}?)" if guesses else ""
    listed = sorted(values)
    more = f" (and {len(listed) - 20} more)" if len(listed) > 20 else ""
    raise InvalidFilterError(f"unknown {key} {asked_text}{hint}; known: {', '.join(listed[:20])}{more}")
