"""One item as a caller gives it (an Item, or a dict with `vector` and `ttl`) made into
the Item and vector `KnowledgeBase.add_many` writes."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace as dc_replace
from typing import Any

from . import validation
from .errors import InvalidInputError
from .model import ITEM_FIELDS, Item, now_ts, to_ts, valid_ts
from .storage import codec
from .storage.contract import Vector


def prepare(raw: Item | Mapping[str, Any], dim: int | None) -> tuple[Item, Vector | None]:
    """The item `add_many` writes: fields checked, id, timestamps and expiry filled in,
    its given vector normalized to `dim` (an InvalidInputError names the item)."""
    now = now_ts()
    if isinstance(raw, Item):
        metadata = dict(raw.metadata) if isinstance(raw.metadata, dict) else raw.metadata
        item, vector, ttl = dc_replace(raw, metadata=metadata), None, None
    elif isinstance(raw, Mapping):
        data = dict(raw)
        vector = data.pop("vector", None)
        ttl = data.pop("ttl", None)
        unknown = set(data) - ITEM_FIELDS
        if unknown:
            raise InvalidInputError(f"unknown item field(s): {', '.join(sorted(unknown))}")
        if data.get("metadata") is None:
            data.pop("metadata", None)
        for key in ("created_at", "updated_at", "expires_at", "last_accessed_at"):
            if data.get(key) is not None:
                try:
                    data[key] = to_ts(data[key])
                except InvalidInputError as exc:
                    label = validation.item_label(data)
                    raise InvalidInputError(f"item {label!r}: {key}: {exc}") from exc
        if "text" not in data:
            raise InvalidInputError("an item needs a text")
        item = Item(**data)
    else:
        raise InvalidInputError(f"an item is an Item or a dict, not {type(raw).__name__}")
    try:
        validation.check_item(item)
    except InvalidInputError as exc:
        raise InvalidInputError(f"item {validation.item_label(item.to_dict())!r}: {exc}") from exc
    label = item.id if item.id is not None else item.text[:40]  # validation.item_label's rule
    if item.id is None:
        item.id = uuid.uuid4().hex
    item.created_at = item.created_at if item.created_at is not None else now
    item.updated_at = now if item.updated_at is None else item.updated_at
    seconds = validation.ttl_seconds(ttl)
    if seconds is not None:
        item.expires_at = now + seconds
        if not valid_ts(item.expires_at):
            raise InvalidInputError(f"item {label!r}: ttl {ttl!r} ends after the year 9999")
    vec = None
    if vector is not None:
        vec = codec.normalized(vector, dim, label=f"item {item.id!r}")
    return item, vec
