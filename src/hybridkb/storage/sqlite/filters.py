"""A search's filters as SQLite WHERE conditions (records.filter_conditions in this dialect)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...pathglob import paths_regex
from .. import records
from ..contract import SearchArea
from .tables import marks


def _metadata_in(alias: str, key: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    # json_each reads JSON true/false as 1/0, so booleans are compared as integers.
    return (f"EXISTS (SELECT 1 FROM json_each({alias}.metadata) AS m "
            f"WHERE m.key = ? AND m.value IN ({marks(len(values))}))",
            [key, *(int(v) if isinstance(v, bool) else v for v in values)])


_DIALECT = records.FilterDialect(
    mark="?",
    one_of=lambda column, values: (f"{column} IN ({marks(len(values))})", list(values)),
    is_false=lambda column: f"{column} = 0",
    metadata_in=_metadata_in,
    # REGEXP is the Python function driver.connect registers on every connection
    path_matches=lambda alias, patterns: (f"json_extract({alias}.metadata, '$.path') REGEXP ?",
                                          [paths_regex(patterns)]),
)


def filter_sql(area: SearchArea, alias: str = "i") -> tuple[str, list[Any]]:
    """WHERE conditions (joined by AND) and their bound values for a SearchArea."""
    clauses, params = records.filter_conditions(area, _DIALECT, alias)
    return (" AND ".join(clauses) or "1"), params
