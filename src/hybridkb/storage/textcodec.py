"""An item's text as SQLite keeps it: a long text compressed on its own, a short one plain.

The text is most of a store's file (at 100k benchmark items 145 of 278 MB). Each row is
compressed alone with Zstandard (no dictionary shared across rows: a store's texts need
not resemble each other, and a row must read back without any other): about half the
bytes for English prose, 15-25 us a text to pack and under 10 to unpack. A packed text is
a BLOB (a zstd frame, recognisable by its magic number), a plain one TEXT: the value's
own type says which, so rows written before migration 012 read back unchanged and no
flag column is needed. Texts under PLAIN_CHARS characters, or that would not shrink, stay
plain. PostgreSQL keeps its text column as it was (TOAST compresses long values there).
"""

from __future__ import annotations

import threading
from typing import Any

import zstandard

from ..errors import StoreError

PLAIN_CHARS = 64  # shorter texts stay plain: a frame's header would eat most of the gain
LEVEL = 3  # zstd's default: 1 is barely faster on texts this short and packs less
_local = threading.local()  # zstd contexts are not safe to share between threads


def _compressor() -> Any:
    c = getattr(_local, "compressor", None)
    if c is None:
        c = _local.compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False)
    return c


def _decompressor() -> Any:
    d = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


def pack(text: str) -> str | bytes:
    """The value to store for `text`: a zstd frame, or the text itself when short or
    incompressible. A lone surrogate raises UnicodeEncodeError, as binding it would."""
    if len(text) < PLAIN_CHARS:
        return text
    raw = text.encode("utf-8")
    packed: bytes = _compressor().compress(raw)
    return packed if len(packed) < len(raw) else text


def unpack(value: Any) -> Any:
    """A stored text value as the text (plain values, None and non-SQLite rows pass)."""
    if not isinstance(value, bytes):
        return value
    try:
        out: str = _decompressor().decompress(value).decode("utf-8")
    except (zstandard.ZstdError, UnicodeDecodeError) as exc:
        raise StoreError(f"an item's stored text is damaged ({exc}); restore a backup, or "
                         f"delete the item and add it again") from exc
    return out


def lowered(value: Any) -> str:
    """A stored text value (or a title), lowercased: what the substring search looks in."""
    text = unpack(value)
    return text.lower() if isinstance(text, str) else ""
