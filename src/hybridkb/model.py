"""Plain records that cross the API: items, filters, hits, results."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from .errors import InvalidFilterError
from .pathglob import paths_regex

# The search modes, defined once: the pipeline validates against MODES, the CLI offers
# them as choices, the MCP tool schema lists them through `Mode`.
Mode = Literal["hybrid", "fts", "vector"]
MODES: tuple[str, ...] = get_args(Mode)


def now_ts() -> float:
    """Seconds since the epoch, UTC; the one clock the store uses."""
    return datetime.now(UTC).timestamp()


# Timestamps must be datetimes too (years 1 to 9999), so every one can be shown as ISO-8601.
MIN_TS = datetime(1, 1, 1, tzinfo=UTC).timestamp()
MAX_TS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def valid_ts(value: object) -> bool:
    """True for epoch seconds of a real date (finite, years 1 to 9999)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and MIN_TS <= value <= MAX_TS)


def to_ts(value: datetime | float | int | str | None) -> float | None:
    """Accept a datetime, epoch seconds or an ISO-8601 string; return epoch seconds."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidFilterError(f"not a timestamp: {value!r}")
    if isinstance(value, int | float):
        if not valid_ts(value):  # also NaN, infinities and ints too big for a float
            raise InvalidFilterError(f"not a finite timestamp of years 1 to 9999: {value!r:.40}")
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidFilterError(f"not an ISO-8601 timestamp: {value!r:.80}") from exc
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        try:
            return value.timestamp()
        except (OverflowError, ValueError) as exc:  # e.g. year 1 with a positive UTC offset
            raise InvalidFilterError(f"not a representable timestamp: {value!r}") from exc
    raise InvalidFilterError(f"not a timestamp: {value!r:.80}")


def storable_text_problem(value: str) -> str | None:
    """Why a string cannot be stored (every backend), or None when it can."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (lone surrogate)"
    return None


def iso(ts: float | None) -> str | None:
    """Epoch seconds as an ISO-8601 UTC string (for JSON output)."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


# What a search's lists name items by: their ids, or a backend's cheaper handle on them
# (SQLite's rowid; storage/contract.py). Pure code that ranks or collapses takes either.
Key = str | int


@dataclass(slots=True)
class Item:
    """One piece of knowledge. Timestamps are epoch seconds (UTC)."""

    text: str
    id: str | None = None
    corpus: str = "default"
    title: str | None = None
    kind: str | None = None
    scope: str | None = None
    repo: str | None = None
    namespace: str | None = None
    source_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    updated_at: float | None = None
    expires_at: float | None = None
    access_count: int = 0
    last_accessed_at: float | None = None
    stale: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def embedding_text(self) -> str:
        """What the embedder reads: title and text, as BEIR's dense baselines do."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass(slots=True, eq=False)
class StoredItem(Item):
    """An item as the store returns it: its id is always set."""

    id: str  # narrowed from Item's `str | None`
    # The store's hash of the text's word set (dedup.word_print), kept so that a search's
    # near-duplicate collapse need not tokenize every text it reads; None for rows written
    # before stores kept it. Not part of the item: equality and to_dict() leave it out.
    word_print: int | None = field(default=None, repr=False)

    def __eq__(self, other: object) -> bool:  # equal to an Item with the same fields
        if not isinstance(other, Item):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Item))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(Item)}


ITEM_FIELDS = frozenset(f.name for f in fields(Item))

# Kinds every store knows (the score policy's, the indexer's, DESIGN's list): a filter on one
# of them finds nothing where none is stored yet, instead of failing as a typo would.
KNOWN_KINDS = ("decision", "lesson", "summary", "temp_note", "memory", "wiki_page", "review_comment",
               "code", "document")

# Columns a filter may name directly; anything else must go through `metadata`.
_EQUALITY_FIELDS = ("kind", "scope", "repo", "namespace")


@dataclass(frozen=True, slots=True)
class Filters:
    """Conditions every retriever applies inside its query.

    A list value means "any of" (SQL IN). `metadata` maps a key to a value
    (equality) or to a list of values (in). `paths` are globs or folder prefixes
    on `metadata.path` (see pathglob.py), `languages` values of `metadata.language`
    (both written by `index`).
    """

    kinds: tuple[str, ...] | None = None
    scope: tuple[str, ...] | None = None
    repo: tuple[str, ...] | None = None
    namespace: tuple[str, ...] | None = None
    metadata: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    created_after: float | None = None
    created_before: float | None = None
    updated_after: float | None = None
    updated_before: float | None = None
    include_expired: bool = False
    include_stale: bool = False
    paths: tuple[str, ...] | None = None
    languages: tuple[str, ...] | None = None

    @property
    def needs_row_filter(self) -> bool:
        """True when the filter goes beyond corpus / expiry / staleness."""
        return bool(
            self.kinds or self.scope or self.repo or self.namespace or self.metadata
            or self.paths or self.languages
            or self.created_after is not None or self.created_before is not None
            or self.updated_after is not None or self.updated_before is not None
        )


_FILTER_KEYS = {
    "kind": "kinds", "kinds": "kinds", "scope": "scope", "repo": "repo",
    "namespace": "namespace", "metadata": "metadata",
    "created_after": "created_after", "created_before": "created_before",
    "updated_after": "updated_after", "updated_before": "updated_before",
    "include_expired": "include_expired", "include_stale": "include_stale",
    "path": "paths", "paths": "paths", "language": "languages", "languages": "languages",
}
_SCALAR = str | int | float | bool


def _as_tuple(name: str, value: Any) -> tuple[Any, ...]:
    values = tuple(value) if isinstance(value, list | tuple | set | frozenset) else (value,)
    if not values:
        raise InvalidFilterError(f"filter {name!r} has an empty list of values")
    for v in values:
        if not isinstance(v, _SCALAR) or (isinstance(v, float) and not math.isfinite(v)):
            raise InvalidFilterError(f"filter {name!r}: {v!r:.80} is not a string or number")
        if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:
            raise InvalidFilterError(f"filter {name!r}: {v!r:.40} is outside the 64-bit integer range")
        if isinstance(v, str) and (problem := storable_text_problem(v)):
            raise InvalidFilterError(f"filter {name!r}: the value {problem}")
    return values


def parse_filters(filters: Filters | dict[str, Any] | None) -> Filters:
    """Validate a user's filter dict into a Filters record; unknown keys are an error."""
    if filters is None:
        return Filters()
    if isinstance(filters, Filters):
        return filters
    if not isinstance(filters, dict):
        raise InvalidFilterError(f"filters must be a dict, not {type(filters).__name__}")
    out: dict[str, Any] = {}
    for key, value in filters.items():
        target = _FILTER_KEYS.get(key)
        if target is None:
            known = ", ".join(sorted(_FILTER_KEYS))
            raise InvalidFilterError(f"unknown filter field {key!r}; known: {known}")
        if target == "metadata":
            if not isinstance(value, dict):
                raise InvalidFilterError("filter 'metadata' must map keys to values")
            pairs = []
            for mkey, mvalue in sorted(value.items(), key=lambda kv: str(kv[0])):
                if not isinstance(mkey, str) or not mkey or storable_text_problem(mkey):
                    raise InvalidFilterError(
                        f"metadata filter key must be a non-empty string of valid text: {mkey!r:.80}")
                pairs.append((mkey, _as_tuple(f"metadata.{mkey}", mvalue)))
            out["metadata"] = tuple(pairs)
        elif target in ("include_expired", "include_stale"):
            if not isinstance(value, bool):
                raise InvalidFilterError(f"filter {key!r} must be true or false")
            out[target] = value
        elif target.endswith(("_after", "_before")):
            out[target] = to_ts(value)
        else:
            values = _as_tuple(key, value)
            if not all(isinstance(v, str) for v in values):
                raise InvalidFilterError(f"filter {key!r} takes strings")
            if target == "paths":
                paths_regex(values)  # a bad pattern fails here, with its reason
            elif target == "languages":
                values = tuple(v.lower() for v in values)
            out[target] = values
    return Filters(**out)


@dataclass(slots=True)
class RetrieverHit:
    """Where one retriever placed a hit: 1-based rank and its raw score."""

    rank: int
    score: float


def _line(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(slots=True)
class Hit:
    """One search result. `score` is its relevance in [0, 1] after the score policy
    (docs/scoring.md); the raw figures behind it are in `retrievers` and `fusion_score`."""

    id: str
    corpus: str
    text: str
    score: float
    title: str | None = None
    kind: str | None = None
    source_label: str = ""
    source_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    retrievers: dict[str, RetrieverHit] = field(default_factory=dict)
    fusion_score: float = 0.0
    relevance: float = 0.0  # before boosts: calibrated (default fusion), else fused / best possible
    boosts: dict[str, float] = field(default_factory=dict)
    alternate_sources: list[dict[str, str]] = field(default_factory=list)
    rerank_score: float | None = None  # the rerank stage's relevance in [0, 1], when it ran
    # The calibration's inputs and its output, the calibrated relevance (docs/scoring.md).
    evidence: dict[str, float] = field(default_factory=dict)

    @property
    def found_by(self) -> tuple[str, ...]:
        return tuple(sorted(self.retrievers))

    @property
    def path(self) -> str | None:
        """The file a hit comes from (items written by `index`), relative to the indexed folder."""
        value = self.metadata.get("path")
        return value if isinstance(value, str) else None

    @property
    def start_line(self) -> int | None:
        """The hit's first line in its file (1-based), when it comes from a file."""
        return _line(self.metadata.get("start_line"))

    @property
    def end_line(self) -> int | None:
        """The hit's last line in its file (1-based, inclusive)."""
        return _line(self.metadata.get("end_line"))

    def to_dict(self, *, explain: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "corpus": self.corpus, "title": self.title, "kind": self.kind,
            "score": self.score, "source": self.source_label, "source_url": self.source_url,
            "found_by": list(self.found_by), "text": self.text, "metadata": self.metadata,
            "created_at": iso(self.created_at),
        }
        if self.path is not None:
            out.update(path=self.path, start_line=self.start_line, end_line=self.end_line)
        if self.alternate_sources:
            out["alternate_sources"] = self.alternate_sources
        if self.rerank_score is not None:
            out["rerank_score"] = self.rerank_score
        if explain:
            out["explanation"] = {
                "retrievers": {
                    name: {"rank": r.rank, "score": r.score} for name, r in self.retrievers.items()
                },
                "fusion_score": self.fusion_score,
                "calibration": self.evidence,
                "relevance": self.relevance,
                "boosts": self.boosts,
                "final_score": self.score,
            }
        return out


@dataclass(slots=True)
class SearchResult:
    """Hits plus which path answered (hybrid, fts, vector, substring, or none) and how
    likely the best of them answers: `confidence` "high" (calibrated relevance >= 0.5),
    "low" (>= 0.2) or "none" (below, or no hit: nothing relevant found)."""

    hits: list[Hit]
    answered_by: str
    mode: str
    query: str
    notes: list[str] = field(default_factory=list)
    confidence: str = "none"

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    @property
    def ids(self) -> list[str]:
        return [h.id for h in self.hits]

    def to_dict(self, *, explain: bool = False) -> dict[str, Any]:
        return {
            "query": self.query, "mode": self.mode, "answered_by": self.answered_by,
            "confidence": self.confidence, "notes": self.notes,
            "hits": [h.to_dict(explain=explain) for h in self.hits],
        }
