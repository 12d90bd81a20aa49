"""The BM25 index's blocks as the client last read them, kept across searches (issue #16).

At 1,000,000 items a query's terms hold 20,000 to 1,100,000 postings, and reading,
sending and parsing them was most of its time; the words that cost most (high df) are the
ones queries share. So a store object keeps the blocks it has parsed, and a read names
the blocks it holds: the server sends a block's `packed` bytes only when the client does
not have that block, and its identity otherwise, in the same statement (one snapshot).

A block is known by its row version: (ctid, xmin) within one file of `bm25_blocks`
(pg_relation_filenode), on one server run (pg_postmaster_start_time) and database. Every
change to a block (postings added by a merge, a delete, a text change) writes a new row
version, with a new ctid or xmin, and no version is changed in place; a ctid freed by
VACUUM is taken again only by a row of a later transaction (another xmin), and a table
rewritten by VACUUM FULL, CLUSTER or TRUNCATE gets a new file. The statement returns its
scope (file, server start, database) so a client whose scope went stale asks again for
every block. (xid wraparound, 2^32 transactions, is the one way an identity could return;
a server that lives that long is restarted by then in practice.)

Each term's postings are weighed once per (blocks, idf, average length, field weights):
a store that nobody writes to meanwhile weighs nothing again (`weighed`).

Memory is bounded (`max_bytes`, least recently used out); the cache is safe to share
between threads (one lock around its dict).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import topk

if TYPE_CHECKING:
    from psycopg import Connection

DEFAULT_MB = 512  # about 22 million postings (16 bytes parsed, 8 for the weight)
# A block's `packed` bytes (migration 015): a width byte (4 or 8) and a base rowid (8
# bytes), then each column bare and big-endian: the rowids less the base in `width` bytes,
# nt and nb in 2 bytes each, dl in 4.
HEADER = 9
ARRAY_HEADER = 20  # array_send of a one-dimensional array: ndim, flags, type, length, lower bound
_COUNTS = ((">i2", np.int16), (">i2", np.int16), (">i4", np.int32))
# What identifies a block's row version and the file, server run and database it is in.
_SCOPE = ("(SELECT pg_relation_filenode('bm25_blocks'::regclass)::text || '/' || "
          "pg_postmaster_start_time()::text || '/' || d.oid::text "
          "FROM pg_database d WHERE d.datname = current_database())")
# Every block of the terms' lexemes (a lexeme per term, not each of its buckets: hundreds
# of parameters, as many index probes); `packed` only for those the client does not name,
# looked up in a hashed subplan (`= ANY(array)` is hashed only when the array is a
# constant, which a generic plan's parameter is not). The keys go as one string: psycopg
# took 11.7 ms to send 1,000 of them as a text[] (each quoted), 0.5 ms joined.
READ_ALL = """
SELECT r.slot, b.n, b.ctid::text || '/' || b.xmin::text AS key,
       CASE WHEN b.ctid::text || '/' || b.xmin::text IN (
                SELECT unnest(string_to_array(%s, ' '))) THEN NULL
            ELSE b.packed END,
       """ + _SCOPE + """
FROM unnest(%s::text[], %s::int[]) AS r (lexeme, slot)
JOIN bm25_blocks b ON b.lexeme = r.lexeme
WHERE {in_corpora} AND b.rowids IS NOT NULL
"""


class Block:
    """A block's postings, parsed: rowids (int64), title and text counts (int16) and the
    document lengths (int32)."""

    __slots__ = ("dl", "ids", "nb", "nt")

    def __init__(self, ids: Any, nt: Any, nb: Any, dl: Any) -> None:
        self.ids, self.nt, self.nb, self.dl = ids, nt, nb, dl

    @classmethod
    def parse(cls, packed: bytes, n: int) -> Block:
        """A block from its `packed` bytes; each column read in place, converted once."""
        width = packed[0]
        base = int.from_bytes(packed[1:HEADER], "big", signed=True)
        ids = np.frombuffer(packed, f">i{width}", count=n, offset=HEADER).astype(np.int64)
        if base:
            ids += base
        columns = []
        at = HEADER + n * width
        for code, native in _COUNTS:
            view = np.frombuffer(packed, code, count=n, offset=at)
            columns.append(view.astype(native))
            at += n * view.itemsize
        return cls(ids, *columns)

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.nt.nbytes + self.nb.nbytes + self.dl.nbytes)


def join(blocks: Sequence[Block]) -> tuple[Any, Any, Any, Any]:
    """Rowids (int64) and nt, nb, dl (float64) of blocks end to end."""
    def cat(parts: list[Any], dtype: Any) -> Any:
        return np.concatenate(parts, dtype=dtype, casting="safe") if parts else np.zeros(0, dtype)

    return (cat([b.ids for b in blocks], np.int64), cat([b.nt for b in blocks], np.float64),
            cat([b.nb for b in blocks], np.float64), cat([b.dl for b in blocks], np.float64))


def weigh(nt: Any, nb: Any, dl: Any, idf: float, weights: tuple[float, float],
          avgdl: float) -> Any:
    """BM25 weights of postings, in the exact statement's order of operations (sql.py), to
    the last bit."""
    tf = weights[0] * nt + weights[1] * nb
    return idf * tf * (topk.K1 + 1) / (tf + topk.K1 * (1 - topk.B + topk.B * dl / avgdl))


class BlockCache:
    """Parsed blocks by (scope, key) and weighed terms, least recently used out past
    `max_bytes`. `max_bytes` 0 keeps nothing (every read asks for every block)."""

    def __init__(self, max_bytes: int = DEFAULT_MB << 20) -> None:
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._known: dict[tuple[str, str], list[str]] = {}  # (scope, lexeme) -> block keys
        self.scope = ""  # of the last read (a read names blocks of this scope)
        self.hits = self.misses = 0  # blocks named and found / sent by the server

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, key: Hashable) -> Any:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        if nbytes > self.max_bytes // 4:  # one value never takes most of the room
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes and self._entries:
                _, (_, size) = self._entries.popitem(last=False)
                self._bytes -= size

    def held(self, scope: str, lexemes: Sequence[str]) -> dict[str, Block]:
        """The blocks held of these lexemes' last read in `scope`, by key (taken now: an
        eviction meanwhile does not lose them)."""
        out: dict[str, Block] = {}
        for lexeme in lexemes:
            for key in self._known.get((scope, lexeme), ()):
                block = self.get((scope, key))
                if block is not None:
                    out[key] = block
        return out

    def remember(self, scope: str, lexeme: str, keys: list[str]) -> None:
        with self._lock:
            if scope != self.scope:
                self._known = {k: v for k, v in self._known.items() if k[0] == scope}
                self.scope = scope
            self._known[(scope, lexeme)] = keys


def read_all(conn: Connection[Any], cache: BlockCache, statement: Any, params: list[Any],
             lexemes: list[str], sizes: list[int],
             split: Callable[[list[int]], list[list[int]]],
             ) -> tuple[str, dict[int, list[tuple[str | None, Block]]]]:
    """Every block of the terms' lexemes (`lexemes[slot]`, holding `sizes[slot]`
    postings), per slot as (key, block) pairs, `packed` sent only for the blocks the cache
    does not hold; and the scope they are in. The slots go in the statements `split` makes
    of the postings to send, all sent at once (a pipeline)."""
    scope = cache.scope
    use = bool(scope and cache.max_bytes)
    mine = [cache.held(scope, [lexeme]) if use else {} for lexeme in lexemes]
    parts = split([max(0, size - sum(len(b.ids) for b in held.values()))
                   for size, held in zip(sizes, mine, strict=True)])
    held = [{k: b for i in part for k, b in mine[i].items()} for part in parts]
    got, by_slot = _receive(conn, cache, statement, params, lexemes, parts, held)
    if got is None:  # another file, server run or database than the names': ask for all
        got, by_slot = _receive(conn, cache, statement, params, lexemes, parts,
                                [{} for _ in parts])
    return got or "", by_slot


def _receive(conn: Connection[Any], cache: BlockCache, statement: Any, params: list[Any],
             lexemes: list[str], parts: list[list[int]], held: list[dict[str, Block]],
             ) -> tuple[str | None, dict[int, list[tuple[str | None, Block]]]]:
    """Send the parts' statements, each naming its `held` blocks, and parse each part's
    blocks while the server reads the next: the blocks by slot and their scope; None when
    blocks were named in a scope that is no longer the server's ("" when the parts'
    scopes differ, a table rewritten between them: nothing is weighed once for good)."""
    named, scope = any(held), cache.scope
    by_slot: dict[int, list[tuple[str | None, Block]]] = {}
    scopes: set[str] = set()
    with contextlib.ExitStack() as stack:
        if len(parts) > 1:  # one statement alone goes without a pipeline (a round trip less)
            stack.enter_context(conn.pipeline())
        cursors = [conn.cursor(binary=True).execute(statement, [
            " ".join(known), [lexemes[i] for i in part], part, *params])
            for known, part in zip(held, parts, strict=True)]
        for cursor, known, part in zip(cursors, held, parts, strict=True):
            rows = cursor.fetchall()
            here = rows[0][4] if rows else scope
            scopes.add(here)
            if named and here != scope:
                continue  # the names meant blocks of another file: read again without them
            keys: dict[int, list[str]] = {slot: [] for slot in part}
            for slot, n, key, packed, _scope in rows:
                keys[slot].append(key)
                if not n:
                    continue
                if packed is None:
                    block = known[key]
                    cache.hits += 1
                else:
                    block = Block.parse(packed, n)
                    cache.misses += 1
                    if cache.max_bytes:
                        cache.put((here, key), block, block.nbytes)
                by_slot.setdefault(slot, []).append((key, block))
            if cache.max_bytes:
                for slot in part:
                    cache.remember(here, lexemes[slot], keys[slot])
    if named and scopes != {scope}:
        return None, {}
    return (scopes.pop() if len(scopes) == 1 else ""), by_slot


def term_postings(cache: BlockCache, scope: str, blocks: list[tuple[str | None, Block]],
                  idf: float, weights: tuple[float, float], avgdl: float,
                  ) -> tuple[Any, Any, Any, float]:
    """A term's rowids, weights, document lengths and largest weight from its blocks
    ((key, block) pairs), weighed once per (blocks, idf, average length, field weights)
    when every block has a key (all of the term's blocks were read). Only the weights are
    kept (the rowids and lengths are the blocks', joined again: a copy costs less than
    the room to keep them twice)."""
    memo = bool(cache.max_bytes and scope and all(k is not None for k, _ in blocks))
    if memo:
        blocks = sorted(blocks, key=lambda kb: kb[0] or "")
    parts = [b for _, b in blocks]
    ids = np.concatenate([b.ids for b in parts]) if parts else np.zeros(0, np.int64)
    key = ("w", scope, tuple(k for k, _ in blocks), idf, avgdl, weights)
    found = cache.get(key) if memo else None
    if found is None:
        _, nt, nb, dl = join(parts)
        weight = weigh(nt, nb, dl, idf, weights, avgdl)
        found = (weight, float(weight.max()) if len(weight) else 0.0)
        if memo:
            cache.put(key, found, int(weight.nbytes))
    dl = np.concatenate([b.dl for b in parts]) if parts else np.zeros(0, np.int32)
    return ids, found[0], dl, found[1]
