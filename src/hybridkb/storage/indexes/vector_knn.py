"""The KNN of one search over a vector base and its delta (vectors.py): which pass answers
for the filters asked, and, where the base's matrix only orders rows (int8), the exact
scores of the best of them from the store's own vectors."""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from .vector_base import VectorBase, Wanted
from .vector_batch import RowIds, Vector
from .vector_math import dot_rows
from .vectors import VectorDelta, VectorSource

# The graph answers when the default filters keep at least this share of the base (it
# over-fetches limit / share); a narrower mask is an exact scan of its rows.
ANN_MIN_SHARE = 0.2
# The codes scan every row's 48 bytes (at 384 dimensions) whatever the filter, so they pay
# while the filter keeps at least this share; below, an exact scan of its rows reads less.
CODES_MIN_SHARE = 0.05
# An int8 base's best this many rows (or the count asked, if more) are scored again on the
# stored vectors (knn): enough that the exact top 10 is among them (100k items: recall@10
# 0.984, as the half matrix's rescore gave).
EXACT_MIN = 64
# ... and a tenth more: the calibrated score scales a hit's cosine by the mean and spread
# of the whole list (300 deep), so its tail must be the exact one too (100k items: every
# query's 300 identical to the half matrix's, ids and cosines; 88/300 without the tenth).
EXACT_EXTRA = 0.1


Scored = list[tuple[int, float]]


def _top(rowids: RowIds, scores: Vector, k: int) -> Scored:
    if k <= 0 or rowids.size == 0:
        return []
    if k < scores.size:
        idx = np.argpartition(-scores, k - 1)[:k]
        rowids, scores = rowids[idx], scores[idx]
    # tolist(): Python ints and floats in one C pass (the same values as int() / float()
    # of each numpy scalar, without making the scalars)
    return list(zip(rowids.tolist(), scores.tolist(), strict=True))


def _merge(parts: list[Scored], limit: int) -> Scored:
    """Best first, ties by rowid: two stable sorts on C keys (a tuple key per pair cost more)."""
    merged = [p for part in parts for p in part]
    merged.sort(key=itemgetter(0))
    merged.sort(key=itemgetter(1), reverse=True)
    return merged[:limit]


def knn(
    base: VectorBase | None, delta: VectorDelta, query: Vector, limit: int, *, wanted: Wanted,
    rows: RowIds | None = None, source: VectorSource | None = None,
) -> Scored:
    """Top `limit` (rowid, cosine) over base and delta.

    `wanted` (corpora, expiry, staleness) is a mask over both; `rows` (sorted), when
    given, is the only rowids a further filter allows (an exact scan of them). Otherwise
    the graph answers when the mask keeps enough of the base for its over-fetch to hold
    recall; a narrow mask, or a base without a graph, is an exact scan of the masked rows.
    A base whose matrix only orders rows (`approximate`: int8) scores its best
    `exact_depth(limit)` again as float32 rows of the stored values: its own rows where they
    are the stored bytes (`rows_stored`), else read from `source` (the store). Either way the
    cosines returned are the stored values', as the delta's are.
    """
    d = delta.live()
    changed = np.fromiter(delta.rows.keys(), dtype=np.int64, count=len(delta.rows))
    parts: list[Scored] = []
    if d.rowids.size:
        keep = wanted.mask(d.corpora, d.expires, d.stale)
        if rows is not None:
            keep &= np.isin(d.rowids, rows)
        parts.append(_top(d.rowids[keep], dot_rows(d.vectors[keep], query), limit))
    if base is None or not len(base):
        return _merge(parts, limit)
    found = _from_base(base, query, limit, wanted, rows, changed)
    if not base.approximate:
        parts.append(_top(*found, limit))
    elif base.rows_stored:
        parts.append(_scored_on_base(base, query, _top(*found, exact_depth(limit)), limit))
    else:
        if source is None:
            raise ValueError("an int8 vector base needs the store to score its rows exactly")
        parts.append(_rescored(source, base.dim, query, _top(*found, exact_depth(limit)), limit))
    return _merge(parts, limit)


def exact_depth(limit: int) -> int:
    """How many of an int8 base's best rows knn scores again on the stored vectors."""
    return max(limit, EXACT_MIN) + int(EXACT_EXTRA * limit)


def _rescored(source: VectorSource, dim: int, query: Vector, picked: Scored, limit: int) -> Scored:
    """The `picked` rows (the filters already kept them) scored on their stored vectors as
    the store holds them now: a row deleted since is gone, one changed since (after the
    search's delta was read) is scored on its new value."""
    if not picked:
        return []
    rowids, vectors = source.stored_vectors([r for r, _ in picked], dim)
    return _top(rowids, dot_rows(vectors, query), limit)


def _scored_on_base(base: VectorBase, query: Vector, picked: Scored, limit: int) -> Scored:
    """The `picked` rows scored on the base's own rows, which are the stored values' bytes
    (rows_stored): the float32 values `_rescored` would read back from the store, without
    the read (330 rows for a hybrid search: 1.3 ms at 1M). A row changed since the base
    was built is in the search's delta, so never picked here."""
    if not picked:
        return []
    rowids = np.sort(np.array([r for r, _ in picked], dtype=np.int64))  # the map read in order
    return _top(rowids, dot_rows(base.matrix[base.positions(rowids)], query), limit)


def _from_base(base: VectorBase, query: Vector, limit: int, wanted: Wanted, rows: RowIds | None,
               changed: RowIds) -> tuple[RowIds, Vector]:
    """The base's candidates (rowids, scores on its matrix) for knn."""
    if rows is not None:
        allowed = rows[~np.isin(rows, changed)] if changed.size else rows
        pos = base.positions(allowed)
        return base.exact(query, pos[base.allowed(wanted, pos)])
    mask, share = base.masked(wanted)
    counted = mask  # kept across searches: the cells' row counts under it are too (coded())
    if changed.size:
        mask = mask & ~np.isin(base.rowids, changed)
        share = float(mask.mean()) if mask.size else 0.0
    if base.first_pass == "codes" and share >= CODES_MIN_SHARE:
        whole = share >= 1.0
        return base.coded(query, limit, None if whole else mask, None if whole else counted)
    if base.first_pass == "graph" and share >= ANN_MIN_SHARE:
        # Everything allowed: the graph's top `limit` is the answer; else over-fetch.
        count = limit if share >= 1.0 else int(np.ceil(2 * limit / share)) + 10
        while count < len(base):
            keys, scores = base.nearest(query, count)
            ok = mask[np.searchsorted(base.rowids, keys)]
            if int(ok.sum()) >= limit:
                return keys[ok], scores[ok]
            count *= 4
    if share > 0.5:
        rowids, scores = base.exact(query, None)
        return rowids[mask], scores[mask]
    return base.exact(query, np.flatnonzero(mask).astype(np.int64))
