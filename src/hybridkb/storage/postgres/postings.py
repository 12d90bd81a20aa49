"""The BM25 blocks of a COPY batch, built in the client (issue #16, bulk ingest).

The insert trigger (migrations 003-004) turns a statement's new rows into `bm25_blocks`
rows: one per (lexeme, corpus, bucket), the postings as parallel arrays in rowid order.
Grouping them with array_agg was the largest part of a bulk load's server time, and the
server is one process while the client sits idle. So a COPY batch switches the trigger
off (`BY_CLIENT`, transaction-local, migration 008), reads its rows' tsvectors back in
binary (`tsvectorsend`), computes the same postings and buckets with numpy
(`hybridkb_postings`, migration 004, rule by rule), groups them, lays out each block's
`packed` bytes (`pack`, as hybridkb_pack_postings would: packing in SQL was half of the
trigger's server time since migration 015; migration 016 lets the client write them) and
inserts the blocks, all in the write's transaction; bulk.py parses one part of a batch
while the server writes the next. The rows are those the trigger writes, byte for byte
(tests/test_pg_postings.py compares the tables).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from psycopg.adapt import Dumper
from psycopg.pq import Format

from . import blockcache

if TYPE_CHECKING:
    from psycopg import Connection

BY_CLIENT = "hybridkb.bm25_by_client"
SET_BY_CLIENT = "SELECT set_config('hybridkb.bm25_by_client', %s, true)"
# The length class of hybridkb_postings, computed by the server itself (the client's
# libm need not round ln() as the server's does at a class edge).
LENGTH_CLASS = ("least(127, floor(2 * ln(greatest(length(tsv), 1)::float8) / ln(2.0::float8))"
                "::integer)")
_READ = f"SELECT corpus, tsvectorsend(tsv), {LENGTH_CLASS} FROM items WHERE rowid = ANY(%s) ORDER BY rowid"
# The blocks of a batch in one statement: the postings go as four arrays sorted by block,
# each block as its key and its first and last index (1-based) into them. Slicing arrays on
# the server cost about what COPY (binary) of the blocks cost it, and the client sends
# five arrays instead of building ten fields a block. Each block's `packed` bytes (`pack`)
# go end to end as one bytea, cut by their start (1-based) and length; so do the distinct
# lexemes (UTF-8, as tsvectorsend sent them) and the corpora by number: psycopg spent 4 of
# 24 s of client time on a 20,000-item batch building two text[] of 190,000 blocks.
_INSERT = """
INSERT INTO bm25_blocks (lexeme, corpus, bucket, lo, hi, n, rowids, nt, nb, dl, packed)
SELECT convert_from(substring(a.w FROM b.ws FOR b.wn), 'UTF8'), a.c[b.ci], b.bucket,
       a.r[b.s], a.r[b.e], b.e - b.s + 1, a.r[b.s:b.e], a.t[b.s:b.e], a.x[b.s:b.e],
       a.d[b.s:b.e], substring(a.p FROM b.ps FOR b.pn)
FROM (SELECT %s::int8[] AS r, %s::int2[] AS t, %s::int2[] AS x, %s::int4[] AS d,
             %s::bytea AS p, %s::bytea AS w, %s::text[] AS c) AS a,
     unnest(%s::int4[], %s::int4[], %s::int4[], %s::int4[], %s::int4[], %s::int4[],
            %s::int4[], %s::int4[]) AS b (ws, wn, ci, bucket, s, e, ps, pn)"""
INSERT_POSTINGS = 4_000_000  # postings per statement: 48 MB of `packed` (a bytea holds at most 1 GB)
_WEIGHT_A = 3  # WordEntryPos: the weight in the top two bits, A = 3
_TEXT_EDGES = np.array([8, 12, 16, 24, 32, 64, 128])  # text count classes 8..14 start here
_WIDTH = 16  # lexemes up to this many bytes are told apart by numpy, as two 64-bit words
_BUCKETS = 16384  # bucket numbers are below this ((5 * 16 + 14) * 128 + 127)
_NARROW_SPAN = 2_147_483_647  # a block whose rowids span less holds them as 4-byte offsets


class BinaryArray:
    """A one-dimensional array of int8, int2 or int4 already in PostgreSQL's binary form
    (sent as is by `ArrayDumper`): a numpy array's bytes, no Python int per element."""

    _TYPES: ClassVar[dict[str, tuple[int, int, int, str]]] = {  # array, element oid; size; code
        "int8": (1016, 20, 8, ">i8"), "int2": (1005, 21, 2, ">i2"), "int4": (1007, 23, 4, ">i4")}

    def __init__(self, values: np.ndarray, kind: str) -> None:
        self.oid, element, size, code = self._TYPES[kind]
        out = np.empty(values.size, np.dtype([("len", ">i4"), ("v", code)]))
        out["len"], out["v"] = size, values
        head = np.array([1, 0, element, values.size, 1], ">i4")  # ndim, no nulls, type, dim, lbound
        self.data = head.tobytes() + out.tobytes()


class ArrayDumper(Dumper):
    """Sends a `BinaryArray` as it is."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return obj.data  # type: ignore[no-any-return]

    def get_key(self, obj: Any, format: Any) -> Any:
        return (type(obj), obj.oid)

    def upgrade(self, obj: Any, format: Any) -> Dumper:
        dumper = type(self)(type(obj))
        dumper.oid = obj.oid
        return dumper


class Postings:
    """The postings of a batch's items: per posting its item (index into the batch, whose
    rows get increasing rowids), lexeme number (into `lexemes`), counts and bucket."""

    def __init__(self, corpora: Sequence[str], lexemes: list[bytes], item: np.ndarray,
                 lexeme: np.ndarray, nt: np.ndarray, nb: np.ndarray, dl: np.ndarray,
                 bucket: np.ndarray) -> None:
        self.corpora, self.lexemes = corpora, lexemes
        self.item, self.lexeme, self.nt, self.nb, self.dl, self.bucket = (
            item, lexeme, nt, nb, dl, bucket)


def _lexeme_spans(arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Walk every tsvector's lexemes at once: (item, start, end, positions) per lexeme.

    A lexeme is its bytes, a zero byte, a uint16 count and that many uint16 positions;
    lexemes hold no zero byte, so the first zero at or after a lexeme's start ends it.
    One step per lexeme rank, over every item that still has one.
    """
    zeros = np.flatnonzero(arr == 0)
    at = starts + 4
    left = sizes.copy()
    active = np.flatnonzero(left > 0)
    items, begins, ends, counts = [], [], [], []
    while active.size:
        begin = at[active]
        end = zeros[np.searchsorted(zeros, begin)]
        npos = (arr[end + 1].astype(np.int64) << 8) | arr[end + 2]
        items.append(active)
        begins.append(begin)
        ends.append(end)
        counts.append(npos)
        at[active] = end + 3 + 2 * npos
        left[active] -= 1
        active = active[left[active] > 0]
    if not items:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    return (np.concatenate(items), np.concatenate(begins), np.concatenate(ends),
            np.concatenate(counts))


def _lexeme_ids(arr: np.ndarray, buf: bytes, begin: np.ndarray, end: np.ndarray
                ) -> tuple[np.ndarray, list[bytes]]:
    """A number per distinct lexeme (the bytes arr[begin:end]) and the lexemes by number.

    Lexemes of up to `_WIDTH` bytes (nearly all) are compared as two 64-bit words, zero
    padded (a lexeme holds no zero byte, so padding cannot make two lexemes equal) and
    sorted by numpy; longer ones go through a dict.
    """
    ids = np.empty(begin.size, np.int64)
    length = end - begin
    short = np.flatnonzero(length <= _WIDTH)
    grid = np.zeros((short.size, _WIDTH), np.uint8)
    start, size = begin[short], length[short]
    for c in range(_WIDTH):
        has = size > c
        grid[has, c] = arr[start[has] + c]
    words = grid.view(np.uint64)
    order = np.lexsort((words[:, 1], words[:, 0]))
    high, low = words[order, 0], words[order, 1]
    new = np.r_[True, (high[1:] != high[:-1]) | (low[1:] != low[:-1])] if order.size else \
        np.zeros(0, bool)
    ids[short[order]] = np.cumsum(new) - 1
    lexemes = [buf[b:e] for b, e in zip(begin[short[order[new]]].tolist(),
                                        end[short[order[new]]].tolist(), strict=True)]
    known: dict[bytes, int] = {}
    for k, b, e in zip(np.flatnonzero(length > _WIDTH).tolist(),
                       begin[length > _WIDTH].tolist(), end[length > _WIDTH].tolist(), strict=True):
        word = buf[b:e]
        if word not in known:
            known[word] = len(lexemes)
            lexemes.append(word)
        ids[k] = known[word]
    return ids, lexemes


def parse(corpora: Sequence[str], blobs: Sequence[bytes], length_classes: np.ndarray
          ) -> Postings:
    """Postings of a batch's items from their corpora, tsvectorsend(tsv) and length
    classes (`LENGTH_CLASS`), as hybridkb_postings computes them: title count nt
    (positions weighted A), text count nb (the other positions, at least one in all),
    document length dl (lexemes), bucket (title class * 16 + text class) * 128 + length
    class."""
    sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
    starts = np.zeros(len(blobs), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    buf = b"".join(blobs)
    arr = np.frombuffer(buf, np.uint8)
    head = arr[starts[:, None] + np.arange(4)].astype(np.int64)
    dl = (head[:, 0] << 24) | (head[:, 1] << 16) | (head[:, 2] << 8) | head[:, 3]
    item, begin, end, npos = _lexeme_spans(arr, starts, dl)
    # Title count: positions whose weight bits are A.
    first = np.cumsum(npos) - npos
    owner = np.repeat(np.arange(item.size), npos)
    at = np.repeat(end + 3, npos) + 2 * (np.arange(int(npos.sum())) - np.repeat(first, npos))
    is_a = (arr[at] >> 6) == _WEIGHT_A
    nt = np.bincount(owner, weights=is_a, minlength=item.size).astype(np.int64)
    nb = np.maximum(npos, 1) - nt
    title_class = np.where(nt < 4, nt, np.where(nt < 8, 4, 5))
    text_class = np.where(nb < 8, nb, 7 + np.searchsorted(_TEXT_EDGES, nb, side="right"))
    item_dl = dl[item]
    bucket = (title_class * 16 + text_class) * 128 + length_classes[item]
    lexeme, lexemes = _lexeme_ids(arr, buf, begin, end)
    return Postings(corpora, lexemes, item, lexeme, nt, nb, item_dl, bucket)


class Blocks:
    """A batch's blocks, one per (lexeme, corpus, bucket), ready for `_INSERT` but for the
    rowids: per posting, sorted by block and then by item, its item's index in the batch."""

    def __init__(self, p: Postings) -> None:
        names = sorted(set(p.corpora))
        number = {c: k for k, c in enumerate(names)}
        item_corpus = np.fromiter((number[c] for c in p.corpora), np.int64, len(p.corpora))
        key = (p.lexeme * max(len(names), 1) + item_corpus[p.item]) * _BUCKETS + p.bucket
        order = np.lexsort((p.item, key))  # stable: a block lists its items in batch order
        key = key[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else key
        group = key[first] // _BUCKETS
        sizes = np.fromiter(map(len, p.lexemes), np.int64, len(p.lexemes))
        self.words, self.names = b"".join(p.lexemes), names
        self.items, self.nt, self.nb, self.dl = p.item[order], p.nt[order], p.nb[order], p.dl[order]
        lexeme = group // max(len(names), 1)
        self.word_size = sizes[lexeme]
        self.word_start = (np.cumsum(sizes) - sizes)[lexeme]
        self.corpus = group % max(len(names), 1)
        self.buckets, self.first = key[first] % _BUCKETS, first
        self.last = np.r_[first[1:], key.size] - 1 if key.size else key

    def chunks(self, postings: int) -> list[slice]:
        """The blocks in runs of about `postings` postings (at least one block each)."""
        ends: Sequence[int] = (np.searchsorted(
            self.last, np.arange(postings, int(self.last[-1]) + 1, postings), side="right"
        ).tolist() if self.last.size else [])
        cuts = sorted({0, self.last.size, *(int(e) for e in ends)})
        return [slice(a, b) for a, b in itertools.pairwise(cuts) if b > a]

    def params(self, rowids: np.ndarray, blocks: slice | None = None) -> list[Any]:
        """`_INSERT`'s parameters for `blocks` (all by default), `rowids` the batch's rowids
        in batch order (increasing)."""
        if blocks is None:
            blocks = slice(0, self.first.size)
        first, last = self.first[blocks], self.last[blocks]
        postings = slice(int(first[0]), int(last[-1]) + 1) if first.size else slice(0, 0)
        ids = rowids[self.items[postings]]
        nt, nb, dl = self.nt[postings], self.nb[postings], self.dl[postings]
        first, last = first - postings.start, last - postings.start
        packed, starts = pack(ids, nt, nb, dl, first, last)
        sizes = np.diff(np.r_[starts, len(packed)])
        return [BinaryArray(ids, "int8"), BinaryArray(nt, "int2"), BinaryArray(nb, "int2"),
                BinaryArray(dl, "int4"), packed, self.words, self.names,
                BinaryArray(self.word_start[blocks] + 1, "int4"),
                BinaryArray(self.word_size[blocks], "int4"),
                BinaryArray(self.corpus[blocks] + 1, "int4"),
                BinaryArray(self.buckets[blocks], "int4"), BinaryArray(first + 1, "int4"),
                BinaryArray(last + 1, "int4"), BinaryArray(starts + 1, "int4"),
                BinaryArray(sizes, "int4")]


def pack(rowids: np.ndarray, nt: np.ndarray, nb: np.ndarray, dl: np.ndarray,
         first: np.ndarray, last: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Each block's `packed` bytes, as hybridkb_pack_postings (migration 015) writes them,
    end to end, and where each block's start. A block is postings first..last (inclusive),
    rowids increasing: a width byte (4 when the rowids span less than 2^31 - 1, else 8), a
    base (the smallest rowid, or 0 when wide), the rowids less the base, nt, nb and dl,
    all big-endian."""
    count = last - first + 1
    lo, hi = rowids[first], rowids[last]
    wide = hi - lo >= _NARROW_SPAN
    width = np.where(wide, 8, 4)
    size = blockcache.HEADER + count * (width + 8)
    start = np.cumsum(size) - size
    out = np.zeros(int(size.sum()), np.uint8)
    out[start] = width
    _put(out, start + 1, np.where(wide, 0, lo), ">i8")
    block = np.repeat(np.arange(first.size), count)
    rank = np.arange(rowids.size) - first[block]
    at, n = start[block] + blockcache.HEADER, count[block]
    narrow = ~wide[block]
    _put(out, (at + 4 * rank)[narrow], rowids[narrow] - lo[block][narrow], ">i4")
    _put(out, (at + 8 * rank)[~narrow], rowids[~narrow], ">i8")
    at = at + n * width[block]
    _put(out, at + 2 * rank, nt, ">i2")
    _put(out, at + 2 * n + 2 * rank, nb, ">i2")
    _put(out, at + 4 * n + 4 * rank, dl, ">i4")
    return out.tobytes(), start


def _put(out: np.ndarray, at: np.ndarray, values: np.ndarray, code: str) -> None:
    """Write `values` as `code` (big-endian) into the bytes of `out` starting at `at`."""
    raw = values.astype(code).view(np.uint8).reshape(-1, np.dtype(code).itemsize)
    out[at[:, None] + np.arange(raw.shape[1])] = raw


def read(conn: Connection[Any], rowids: Sequence[int]) -> Postings:
    """The postings of these item rows (in rowid order), from their stored tsvectors."""
    rows = conn.cursor(binary=True).execute(_READ, [sorted(rowids)]).fetchall()
    return parse([r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows], np.int64))


class Joiner:
    """One batch's postings from those of its consecutive parts, each numbered into one
    lexeme table as it comes (bulk.py adds a part while the server writes the next, so
    that only the concatenation waits for the last)."""

    def __init__(self) -> None:
        self.number: dict[bytes, int] = {}
        self.parts: list[Postings] = []
        self.lexeme: list[np.ndarray] = []
        self.item: list[np.ndarray] = []
        self.corpora: list[str] = []

    def add(self, p: Postings) -> None:
        number = self.number
        mapping = np.fromiter((number.setdefault(x, len(number)) for x in p.lexemes), np.int64,
                              len(p.lexemes))
        self.lexeme.append(mapping[p.lexeme])
        self.item.append(p.item + len(self.corpora))
        self.corpora += p.corpora
        self.parts.append(p)

    def result(self) -> Postings:
        if len(self.parts) == 1:
            return self.parts[0]
        nt, nb, dl, bucket = (np.concatenate([getattr(p, f) for p in self.parts])
                              for f in ("nt", "nb", "dl", "bucket"))
        return Postings(self.corpora, list(self.number), np.concatenate(self.item),
                        np.concatenate(self.lexeme), nt, nb, dl, bucket)


def join(parts: Sequence[Postings]) -> Postings:
    """One batch's postings from those of its consecutive parts (lexemes numbered anew)."""
    joiner = Joiner()
    for p in parts:
        joiner.add(p)
    return joiner.result()


def write_blocks(conn: Connection[Any], rowids: Sequence[int], postings: Postings) -> None:
    """Add the BM25 blocks of a batch's new item rows (written while `BY_CLIENT` was on);
    `rowids` in batch order, increasing."""
    if not rowids:
        return
    conn.adapters.register_dumper(BinaryArray, ArrayDumper)
    blocks, ids = Blocks(postings), np.asarray(rowids, np.int64)
    for part in blocks.chunks(INSERT_POSTINGS):
        conn.execute(_INSERT, blocks.params(ids, part))
