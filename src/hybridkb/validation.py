"""Input checks shared by every face: what a store accepts, and the typed error when it does not.

KnowledgeBase runs these on every write; the CLI, the MCP server and import call
the same functions, so one rule gives one message wherever the input comes from.
Pure: plain values in, a value or an `InvalidInputError` out. A caller's vector is
checked by the vector codec (storage/codec.py: `normalized`).
"""

from __future__ import annotations

import math
import numbers
import re
import string
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from .errors import InvalidInputError
from .model import INT64_MAX, Item, storable_text_problem, valid_ts

MAX_TEXT_CHARS = 1_000_000
MAX_ID_CHARS = 512
MAX_NAME_CHARS = 128
MAX_METADATA_DEPTH = 32
MAX_TEMPLATE_CHARS = 500
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")

# Item fields holding plain strings (beside `text`, checked on its own).
_STRING_FIELDS = ("id", "corpus", "title", "kind", "scope", "repo", "namespace", "source_url")
TIMESTAMP_FIELDS = ("created_at", "updated_at", "expires_at", "last_accessed_at")


def check_name(kind: str, value: object) -> str:
    """A corpus (or similar) name: 1-128 printable characters, not only spaces."""
    if not isinstance(value, str) or not _NAME.match(value) or not value.strip():
        raise InvalidInputError(
            f"{kind} must be a non-empty string of at most {MAX_NAME_CHARS} printable characters: "
            f"{value!r}")
    return value


def check_metadata(metadata: object) -> None:
    """A JSON object with string keys whose strings every backend can store."""
    if not isinstance(metadata, dict):
        raise InvalidInputError("metadata must be a JSON object")
    stack: list[tuple[object, int]] = [(metadata, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise InvalidInputError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
        if isinstance(value, dict):
            for key, inner in value.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"metadata keys must be strings, not {key!r:.40}")
                if problem := storable_text_problem(key):
                    raise InvalidInputError(f"metadata key {key!r:.40} {problem}")
                stack.append((inner, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((inner, depth + 1) for inner in value)
        elif isinstance(value, str):
            if problem := storable_text_problem(value):
                raise InvalidInputError(f"metadata value {value!r:.40} {problem}")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidInputError(f"metadata holds {value!r}, which JSON cannot represent")
        elif value is not None and not isinstance(value, bool | int):
            raise InvalidInputError(f"metadata is not JSON-serializable: {type(value).__name__} value")


def check_item(item: Item) -> None:
    """Every field of an item a store would keep; the message names the field."""
    if not isinstance(item.text, str) or not item.text.strip():
        raise InvalidInputError("text must be a non-empty string")
    if len(item.text) > MAX_TEXT_CHARS:
        raise InvalidInputError(f"text has {len(item.text)} characters; the limit is {MAX_TEXT_CHARS}")
    if problem := storable_text_problem(item.text):
        raise InvalidInputError(f"text {problem}")
    if item.id is not None and (not isinstance(item.id, str) or not item.id
                                or len(item.id) > MAX_ID_CHARS):
        raise InvalidInputError(f"id must be a non-empty string of at most {MAX_ID_CHARS} characters")
    check_name("corpus", item.corpus)
    for name in _STRING_FIELDS:
        value = getattr(item, name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidInputError(f"{name} must be a string")
        if problem := storable_text_problem(value):
            raise InvalidInputError(f"{name} {problem}")
    check_metadata(item.metadata)
    for name in TIMESTAMP_FIELDS:
        value = getattr(item, name)
        if value is not None and not valid_ts(value):
            raise InvalidInputError(f"{name} must be a finite timestamp of years 1 to 9999")
    if isinstance(item.access_count, bool) or not isinstance(item.access_count, int) \
            or not 0 <= item.access_count <= INT64_MAX:
        raise InvalidInputError("access_count must be an integer >= 0")
    if not isinstance(item.stale, bool):
        raise InvalidInputError("stale must be true or false")


def item_label(data: Mapping[str, Any]) -> object:
    """How an error names an item: its id, else the start of its text."""
    if data.get("id") is not None:
        return data["id"]
    text = data.get("text")
    return text[:40] if isinstance(text, str) else "?"


def corpus_names(names: Sequence[str]) -> list[str]:
    """A list of corpus names (a write's `within`); one string is refused, not split."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidInputError(f"within must be a list of corpus names, got {names!r:.60}")
    return [check_name("corpus", n) for n in names]


def lookup_ids(ids: Sequence[str]) -> list[str]:
    """The ids worth asking a store for: an id no item can have is simply not found."""
    if isinstance(ids, str):
        raise InvalidInputError("ids must be a list of strings, not one string")
    wrong = next((i for i in ids if not isinstance(i, str)), None)
    if wrong is not None:  # e.g. delete(["a", "b"]): a list where one id belongs
        raise InvalidInputError(f"an id is a string, got {type(wrong).__name__} {wrong!r:.60}"
                                " (several ids: the *_many methods)")
    return [i for i in ids if i and len(i) <= MAX_ID_CHARS
            and storable_text_problem(i) is None]


def ttl_seconds(ttl: float | timedelta | None) -> float | None:
    """A time-to-live as positive seconds (None: never expires)."""
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InvalidInputError(f"ttl must be a positive number of seconds, got {ttl!r}")
    return float(seconds)


EMBED_MODES = ("sync", "defer")


def check_embed_mode(mode: object) -> str:
    """"sync" (embed before the commit) or "defer" (commit text; the vector follows)."""
    if mode not in EMBED_MODES:
        raise InvalidInputError(f"embed must be one of {', '.join(EMBED_MODES)}, got {mode!r:.60}")
    return str(mode)


def check_rerank_depth(depth: object) -> int:
    """How many of a search's first hits a rerank stage reorders (1 to 1000)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 1000:
        raise InvalidInputError(f"rerank_depth must be an integer from 1 to 1000, got {depth!r:.60}")
    return depth


def check_batch_size(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


# A label field: a plain name ({title}, {id}, a metadata key), no attribute or index access.
_LABEL_FIELD = re.compile(r"^(?!\d+$)[^.\[\]{}!:]+$")
# A format spec that only pads, aligns or cuts a string: "<20", ">8", "^12", ".40", "10.40".
_LABEL_SPEC = re.compile(r"^(.?[<>^])?\d{0,3}(\.\d{1,3})?$")


def label_template_problem(template: object) -> str | None:
    """Why a hit label template ("[ticket: {title}]") is refused, or None when it is fine.

    Only plain field names: no `{title.__class__}`, `{title[0]}`, `{0}`, conversions
    (`!r`) or nested fields; a spec may only pad, align or cut (width and precision < 1000).
    Checked when a template is set and again before one is rendered (a store written by
    an older version may hold anything).
    """
    if not isinstance(template, str) or len(template) > MAX_TEMPLATE_CHARS \
            or storable_text_problem(template):
        return f"a label template is a string of at most {MAX_TEMPLATE_CHARS} characters"
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        return str(exc)
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if not _LABEL_FIELD.match(name):
            return f"{{{name}}} is not a plain field name (use {{title}}, {{id}} or a metadata key)"
        if conversion is not None:
            return f"{{{name}!{conversion}}}: conversions are not allowed"
        if spec and not _LABEL_SPEC.match(spec):
            return f"{{{name}:{spec}}}: a format spec may only pad, align or cut, below 1000"
    return None


def check_label_template(template: object) -> str:
    """A hit label template: see `label_template_problem`."""
    problem = label_template_problem(template)
    if problem is not None:
        raise InvalidInputError(f"bad label template {template!r:.80}: {problem}")
    assert isinstance(template, str)
    return template


# -- store targets ------------------------------------------------------------------------------

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# A libpq key=value connection string ("host=db dbname=kb password=..."), not a file name.
_CONNINFO = re.compile(r"^\s*(host|hostaddr|dbname|user|password|port|service|sslmode)\s*=", re.I)
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.I)
_HIDDEN = "***"


def check_target(target: object) -> str:
    """A store target as a string: a file path, ":memory:", or a PostgreSQL URL / conninfo.

    An empty target is refused: SQLite would open a private temporary database that is
    gone when the process ends, so everything written to it would be silently lost.
    """
    location = target.__fspath__() if hasattr(target, "__fspath__") else target
    if not isinstance(location, str):
        raise InvalidInputError(f"a store target is a file path or a postgresql:// URL, "
                                f"not {type(target).__name__}")
    if not location.strip():
        raise InvalidInputError(
            "the store target is empty: give a file path or a postgresql:// URL (--db or HYBRIDKB_DB); "
            "an empty one would be a temporary database that loses every write")
    if "\x00" in location:
        raise InvalidInputError("a store target cannot contain NUL characters")
    return location


def is_postgres_target(location: str) -> bool:
    """A postgresql:// URL or a libpq key=value connection string."""
    return location.startswith(_POSTGRES_SCHEMES) or bool(_CONNINFO.match(location))


def redact_target(location: str) -> str:
    """The target with every password hidden: `user:pw@`, `?password=`, `password=` (conninfo).

    Never raises, whatever the text: it is what error messages about a bad URL show.
    """
    if not is_postgres_target(location):
        return location
    if not location.startswith(_POSTGRES_SCHEMES):
        return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + _HIDDEN, location)
    scheme, _, rest = location.partition("://")
    cut = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            cut = min(cut, found)
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + _HIDDEN
        netloc = f"{userinfo}@{hosts}"
    path, sep, query = tail.partition("?")
    if sep:
        query, hash_, fragment = query.partition("#")
        params = []
        for pair in query.split("&"):
            key, eq, _value = pair.partition("=")
            if eq and _unquote(key).strip().lower() == "password":
                pair = f"{key}={_HIDDEN}"
            params.append(pair)
        tail = f"{path}?{'&'.join(params)}{hash_}{fragment}"
    return f"{scheme}://{netloc}{tail}"


def target_secrets(location: str) -> list[str]:
    """The password texts in a target, to scrub from a driver's message that might echo one."""
    shown = redact_target(location)
    if shown == location:
        return []
    found: list[str] = []
    if location.startswith(_POSTGRES_SCHEMES):
        netloc = re.split(r"[/?#]", location.partition("://")[2], maxsplit=1)[0]
        userinfo = netloc.rpartition("@")[0]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
        query = location.partition("?")[2].partition("#")[0]
        for pair in query.split("&"):
            key, eq, value = pair.partition("=")
            if eq and _unquote(key).strip().lower() == "password":
                found.append(value)
    else:
        found.extend(m.group(2).strip("'") for m in _CONNINFO_PASSWORD.finditer(location))
    secrets = {s for s in found if s} | {_unquote(s) for s in found if s}
    return sorted(secrets, key=len, reverse=True)


def scrub(message: str, location: str) -> str:
    """`message` with the target's passwords replaced by ***.

    The whole target is replaced first; a password alone only when it has 4 or more
    characters, since hiding every "p" of a message would make it unreadable.
    """
    message = message.replace(location, redact_target(location))
    for secret in target_secrets(location):
        if len(secret) >= 4:
            message = message.replace(secret, _HIDDEN)
    return message


def _unquote(text: str) -> str:
    """Percent-decoding (UTF-8) without urllib: this module does no I/O and imports none."""
    parts = re.split(r"((?:%[0-9A-Fa-f]{2})+)", text)
    return "".join(
        bytes(int(part[i + 1:i + 3], 16) for i in range(0, len(part), 3)).decode("utf-8", "replace")
        if n % 2 else part for n, part in enumerate(parts))


# -- search options ------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(name: str, value: object, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if not _is_number(value):
        raise InvalidInputError(f"{name} must be a number, got {value!r:.60}")
    return float(value)  # type: ignore[arg-type]


def _integer(name: str, value: object, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if not _is_integer(value):
        raise InvalidInputError(f"{name} must be an integer, got {value!r:.60}")
    return int(value)  # type: ignore[call-overload, no-any-return]


def search_options(
    *, mode: object, limit: object, offset: object, fusion: object, weights: object, rrf_k: object,
    depth: object, dedup_threshold: object, dedup_cosine: object, min_score: object, touch: object,
) -> dict[str, Any]:
    """Search options of the right types, named in the error when not (`limit=True` is no int).

    Ranges are the search plan's to check; this only makes sure each value is what it claims.
    """
    if not isinstance(mode, str):
        raise InvalidInputError(f"mode must be a string, got {mode!r:.60}")
    if fusion is not None and not isinstance(fusion, str):
        raise InvalidInputError(f"fusion must be a string, got {fusion!r:.60}")
    pair: tuple[float, ...] | None = None
    if weights is not None:
        if isinstance(weights, str | bytes | Mapping) or not isinstance(weights, Sequence) \
                or not all(_is_number(w) for w in weights):
            raise InvalidInputError(f"weights must be two numbers (full-text, vector), got {weights!r:.60}")
        pair = tuple(float(w) for w in weights)
    if not isinstance(touch, bool):
        raise InvalidInputError(f"touch must be true or false, got {touch!r:.60}")
    return {
        "mode": mode, "fusion": fusion, "weights": pair, "touch": touch,
        "limit": _integer("limit", limit), "offset": _integer("offset", offset),
        "rrf_k": _number("rrf_k", rrf_k), "depth": _integer("depth", depth, optional=True),
        "dedup_threshold": _number("dedup_threshold", dedup_threshold, optional=True),
        "dedup_cosine": _number("dedup_cosine", dedup_cosine, optional=True),
        "min_score": _number("min_score", min_score, optional=True),
    }
