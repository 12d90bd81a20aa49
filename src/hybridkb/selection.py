"""Which corpora and items a call means: `corpus=` vs `corpora=`, and a filter tested on one item. Pure.

`item_matches` answers in Python what the backends' filter SQL answers in the
query (kinds, scope, repo, namespace, metadata equality, time ranges, expiry,
staleness), for walks over items such as `KnowledgeBase.iter_items`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence

from . import validation
from .errors import InvalidInputError, NotFoundError
from .model import Filters, Item

# A server's clients (REST, MCP) may write into a new corpus only while the store holds
# fewer corpora than this; the library, the CLI and `index` are not limited.
MAX_CLIENT_CORPORA = 1000


def client_corpus(corpus: str | None, default: str, allowed: Sequence[str] | None,
                  existing: Mapping[str, int]) -> str:
    """The corpus a server's client (REST, MCP) writes into: `corpus`, else `default` (the
    first of `allowed` when the server is limited to others). Refused outside `allowed`,
    and when it would create a corpus past MAX_CLIENT_CORPORA."""
    if corpus is None:
        corpus = default if allowed is None or default in allowed else allowed[0]
    elif allowed is not None and corpus not in allowed:
        raise InvalidInputError(f"corpus {corpus!r} is not writable on this server; "
                                f"writable: {', '.join(allowed)}")
    if isinstance(corpus, str) and corpus not in existing and len(existing) >= MAX_CLIENT_CORPORA:
        raise InvalidInputError(
            f"this store holds {len(existing)} corpora, the most a server's clients may create "
            f"({MAX_CLIENT_CORPORA} corpora): write into an existing one, or create it with the "
            "CLI or the library")
    return corpus


def pick_corpora(corpus: str | None, corpora: Sequence[str] | str | None) -> Sequence[str] | str | None:
    """`corpus="x"` (one) or `corpora=[...]` (several); both at once is an error."""
    if corpus is not None and corpora is not None:
        raise InvalidInputError("give either corpus= (one corpus) or corpora= (several), not both")
    if corpus is not None:
        if not isinstance(corpus, str):
            raise InvalidInputError(f"corpus= takes one name (a string); for several use corpora=: "
                                    f"{corpus!r:.80}")
        return [corpus]
    return corpora


def resolve_corpora(existing: Mapping[str, int], corpora: Sequence[str] | str | None) -> list[str]:
    """The corpora a search covers: all of `existing` (None), or the named ones that exist;
    naming only unknown ones is an error (a typo would otherwise find nothing)."""
    if corpora is None:
        return sorted(existing)
    if not isinstance(corpora, str) and (isinstance(corpora, Mapping | bytes)
                                         or not isinstance(corpora, Iterable)):
        raise InvalidInputError(f"corpora must be a corpus name or a list of them, got {corpora!r:.60}")
    names = [corpora] if isinstance(corpora, str) else list(corpora)
    for name in names:
        validation.check_name("corpus", name)
    unknown = [n for n in names if n not in existing]
    if unknown and len(unknown) == len(names) and existing:
        guesses = [g for n in unknown for g in difflib.get_close_matches(n, sorted(existing), n=2)]
        hint = f" (did you mean {' or '.join(map(repr, dict.fromkeys(guesses)))}?)" if guesses else ""
        raise NotFoundError(
            f"unknown corpus {', '.join(map(repr, unknown))}{hint}; known: {', '.join(sorted(existing))}")
    return [n for n in dict.fromkeys(names) if n in existing]


def _metadata_equal(stored: object, wanted: object) -> bool:
    if isinstance(stored, bool) or isinstance(wanted, bool):  # JSON true is not the number 1 here
        return isinstance(stored, bool) and isinstance(wanted, bool) and stored == wanted
    return stored == wanted and type(stored) is not list and type(stored) is not dict


def item_matches(item: Item, filters: Filters, now: float) -> bool:
    """True when `item` passes every condition of `filters` at time `now`."""
    if not filters.include_expired and item.expires_at is not None and item.expires_at <= now:
        return False
    if not filters.include_stale and item.stale:
        return False
    for values, value in ((filters.kinds, item.kind), (filters.scope, item.scope),
                          (filters.repo, item.repo), (filters.namespace, item.namespace)):
        if values and value not in values:
            return False
    for key, wanted in filters.metadata:
        if key not in item.metadata or not any(_metadata_equal(item.metadata[key], w) for w in wanted):
            return False
    for stamp, low, high in ((item.created_at, filters.created_after, filters.created_before),
                             (item.updated_at, filters.updated_after, filters.updated_before)):
        if low is not None and (stamp is None or stamp < low):
            return False
        if high is not None and (stamp is None or stamp >= high):
            return False
    return True


AWAITING_SHOWN = 1000  # a search counts the items still waiting for a vector up to this many


def awaiting_note(missing: Callable[[int, Sequence[str]], list[str]], corpora: Sequence[str]) -> str | None:
    """The note of a search while items of its corpora wait for their vectors (None: none do);
    `missing` is the backend's ids_missing_vectors."""
    waiting = len(missing(AWAITING_SHOWN + 1, corpora))
    count = f"over {AWAITING_SHOWN:,}" if waiting > AWAITING_SHOWN else str(waiting)
    if not waiting:
        return None
    return f"{count} item(s) awaiting embedding: found by full text only until embedded (`hybridkb embed`)"
