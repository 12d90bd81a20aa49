"""Input checks shared by every face: what a store accepts, and the typed error when it does not.

KnowledgeBase runs these on every write; the CLI, the MCP server and import call
the same functions, so one rule gives one message wherever the input comes from.
Pure: plain values in, a value or an `InvalidInputError` out. A caller's vector is
checked by the vector codec (storage/codec.py: `normalized`).
"""

from __future__ import annotations

import collections
import math
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


def lookup_ids(ids: Sequence[str]) -> list[str]:
    """The ids worth asking a store for: an id no item can have is simply not found."""
    if isinstance(ids, str):
        raise InvalidInputError("ids must be a list of strings, not one string")
    return [i for i in ids if isinstance(i, str) and i and len(i) <= MAX_ID_CHARS
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


def check_batch_size(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def check_label_template(template: object) -> str:
    """A hit label template such as "[ticket: {title}]": plain fields, no huge widths."""
    if not isinstance(template, str) or len(template) > MAX_TEMPLATE_CHARS \
            or storable_text_problem(template):
        raise InvalidInputError(f"a label template is a string of at most {MAX_TEMPLATE_CHARS} characters")
    try:  # fields are plain names ({title}, {id}, a metadata key); "" stands in for each
        specs = [spec for _, _, spec, _ in string.Formatter().parse(template) if spec]
        if any(re.search(r"\d{4}", spec) for spec in specs):
            raise ValueError("a format width of 1000 or more")
        template.format_map(collections.defaultdict(str))
    except (ValueError, IndexError, KeyError, AttributeError, TypeError) as exc:
        raise InvalidInputError(f"bad label template {template!r}: {exc}") from exc
    return template
