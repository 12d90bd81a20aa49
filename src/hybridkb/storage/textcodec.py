"""An item's text as SQLite keeps it: a long text compressed on its own, a short one plain.

The text is most of a store's file (at 100k benchmark items 145 of 278 MB). Each row is
compressed alone with Zstandard (no dictionary shared across rows: a store's texts need
not resemble each other, and a row must read back without any other): about half the
bytes for English prose, 15-25 us a text to pack and under 10 to unpack. A packed text is
a BLOB (a zstd frame, recognisable by its magic number), a plain one TEXT: the value's
own type says which, so rows written before migration 012 read back unchanged and no
flag column is needed. Texts under PLAIN_CHARS characters, or that would not shrink, stay
plain. PostgreSQL keeps its text column as it was (TOAST compresses long values there).

zstd lets go of the GIL inside each call, and taking it back waits behind any other busy
Python thread (the text index's indexing thread during a load): one call a text cost 72
against 24 us a text beside a busy thread. A batch is therefore packed, and a search's
rows unpacked, in one call each (`pack_many`, `unpack_many`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import zstandard

from ..errors import StoreError

PLAIN_CHARS = 64  # shorter texts stay plain: a frame's header would eat most of the gain
LEVEL = 1  # against 3: a quarter faster, 0.3% more bytes (SciFact)
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


def pack_many(texts: Sequence[str]) -> list[str | bytes]:
    """`pack` of each text, the long ones compressed in one call."""
    out: list[str | bytes] = list(texts)
    long = [i for i, text in enumerate(texts) if len(text) >= PLAIN_CHARS]
    if len(long) < 2:
        return [pack(text) for text in texts]
    raws = [texts[i].encode("utf-8") for i in long]
    frames = _compressor().multi_compress_to_buffer(raws, threads=0)
    for n, i in enumerate(long):
        packed = frames[n].tobytes()
        if len(packed) < len(raws[n]):
            out[i] = packed
    return out


def unpack_many(values: Sequence[Any]) -> list[Any]:
    """`unpack` of each value, the packed ones decompressed in one call."""
    packed = [i for i, value in enumerate(values) if isinstance(value, bytes)]
    if len(packed) < 2:
        return [unpack(value) for value in values]
    out = list(values)
    try:
        texts = _decompressor().multi_decompress_to_buffer([values[i] for i in packed], threads=0)
        for n, i in enumerate(packed):
            out[i] = texts[n].tobytes().decode("utf-8")
    except (zstandard.ZstdError, UnicodeDecodeError):
        return [unpack(value) for value in values]  # each on its own: the damaged one named
    return out


def unpacked_rows(rows: Sequence[Sequence[Any]], column: int) -> list[tuple[Any, ...]]:
    """Rows as read, with the text in `column` unpacked (all of them in one call)."""
    texts = unpack_many([row[column] for row in rows])
    return [(*row[:column], text, *row[column + 1:]) for row, text in zip(rows, texts, strict=True)]


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
