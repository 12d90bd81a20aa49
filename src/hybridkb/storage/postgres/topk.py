"""Exact top-k BM25 over an impact-ordered index: the bounds and the stopping rule (pure).

The index (migration 003) files each posting under a bucket that is a function of its
title count, text count and document length class, so every bucket has a best possible
BM25 weight under the statistics of the moment (highest counts, shortest length of its
class). A query reads the buckets of its terms best first, a few at a time (no random
access: "NRA", Fagin, Lotem & Naor 2003, with block-max bounds as in block-max WAND,
Ding & Suel 2011), and keeps for each document seen a lower bound (the weights read) and
an upper bound (plus the best unread weight of each term it was not seen in). It stops
when the k-th best lower bound beats what any unseen document could reach; the documents
whose upper bound still reaches that threshold are scored exactly, so the answer is the
exact BM25 top k, the same as scoring every match (up to float rounding).

A document's postings of every term sit in buckets of its one length class, so the bounds
of a document whose length is known, and of an unseen one, can be tightened to the unread
buckets of one class (length_upper, length_unseen_bound).

Phrase terms (several lexemes) are bounded through their rarest lexeme's postings (a
phrase occurs no more often than any of its words) and always scored exactly at the end.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75
SLACK = 1e-9  # bounds are compared with this much room for float rounding

# Bucket classes (hybridkb_postings in migration 003): the largest count in each class.
_NT_HI = np.array([0, 1, 2, 3, 7, 256], dtype=np.float64)
_NB_HI = np.array([0, 1, 2, 3, 4, 5, 6, 7, 11, 15, 23, 31, 63, 127, 256], dtype=np.float64)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


def idf(n_docs: float, df: float) -> float:
    """Lucene's idf, ln(1 + (N - df + 0.5) / (df + 0.5)), as sql.py and SQLite's tantivy index."""
    return float(np.log1p((max(n_docs, df) - df + 0.5) / (df + 0.5)))


def saturation(tf: Floats, dl: Floats, avgdl: float) -> Floats:
    """BM25's term-frequency factor (without idf): rises with tf, falls with length."""
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))


def _tf_hi(buckets: Ints, weights: tuple[float, float]) -> Floats:
    """The highest weighted term frequency of each bucket's class."""
    nb_class = (buckets // 128) % 16
    nt_class = buckets // (128 * 16)
    tf: Floats = weights[0] * _NT_HI[np.minimum(nt_class, 5)] + weights[1] * _NB_HI[np.minimum(nb_class, 14)]
    return tf


def _dl_lo(dl_class: Ints | Floats) -> Floats:
    """The shortest length of each length class (floor(2 log2 dl), migration 003)."""
    lo: Floats = np.maximum(np.exp2(np.asarray(dl_class) / 2.0) * (1 - SLACK), 1.0)
    return lo


def bucket_bounds(buckets: Ints, weights: tuple[float, float], avgdl: float) -> Floats:
    """The best saturation any posting in each bucket can have."""
    bound: Floats = saturation(_tf_hi(buckets, weights), _dl_lo(buckets % 128), avgdl) * (1 + SLACK)
    return bound


@dataclass
class TermPlan:
    """One query term: the buckets of the lexeme that bounds it, best first."""

    ord: int
    lexeme: str
    exact: bool  # one lexeme: its postings give its weight exactly
    idf: float
    buckets: Ints
    counts: Ints
    bounds: Floats  # idf * best saturation, descending
    read: int = 0  # buckets[:read] fetched

    @property
    def unread_bound(self) -> float:
        return float(self.bounds[self.read]) if self.read < len(self.bounds) else 0.0


def plan_term(ord_: int, lexeme: str, exact: bool, idf_: float, buckets: Ints, counts: Ints,
              weights: tuple[float, float], avgdl: float) -> TermPlan:
    bounds = idf_ * bucket_bounds(buckets, weights, avgdl)
    order = np.argsort(-bounds, kind="stable")
    return TermPlan(ord_, lexeme, exact, idf_, buckets[order], counts[order], bounds[order])


def next_reads(terms: list[TermPlan], budget: int) -> list[tuple[TermPlan, int]]:
    """The next buckets to read, best bound first over all terms, until about `budget`
    postings: (term, bucket) pairs; each term advances along its own order."""
    heads = [(-t.unread_bound, -i) for i, t in enumerate(terms) if t.read < len(t.buckets)]
    heapq.heapify(heads)  # best bound first; among equal bounds the later term, as max()
    out: list[tuple[TermPlan, int]] = []
    taken = 0
    while heads and taken < budget:
        _, i = heapq.heappop(heads)
        t = terms[-i]
        out.append((t, int(t.buckets[t.read])))
        taken += int(t.counts[t.read])
        t.read += 1
        if t.read < len(t.buckets):
            heapq.heappush(heads, (-t.unread_bound, i))
    return out


@dataclass
class Seen:
    """What the reads so far say about each document seen (by rowid)."""

    n_terms: int
    rowids: list[Ints] = field(default_factory=list)
    slots: list[Ints] = field(default_factory=list)
    lengths: list[Ints] = field(default_factory=list)  # each posting's document length
    exact: list[Floats] = field(default_factory=list)  # weight, for exact terms
    bound: list[Floats] = field(default_factory=list)  # weight bound, for phrase terms

    keys: list[int] = field(default_factory=list)  # the slot of each part added

    # Of the last bounds(): each posting's document and slot, each document's phrase bounds.
    last: tuple[Ints, Ints, Floats] | None = None

    def _cat(self, parts: list[Any]) -> Any:
        """The parts end to end, term by term (so sums per document add in one order,
        that of the exact statement, however the reads interleaved the terms)."""
        order = sorted(range(len(parts)), key=self.keys.__getitem__)
        return np.concatenate([parts[i] for i in order])

    def add(self, slot: int, rowids: Ints, weight: Floats, exact: bool, dl: Ints) -> None:
        """Postings read for the term in `slot`, in the order read (a term's may come in
        several parts, interleaved with other terms')."""
        self.keys.append(slot)
        self.rowids.append(rowids)
        self.lengths.append(dl)
        self.slots.append(np.full(len(rowids), slot, dtype=np.int64))
        zero = np.zeros(len(rowids))
        self.exact.append(weight if exact else zero)
        self.bound.append(zero if exact else weight)

    def bounds(self, unread: Floats, exact: npt.NDArray[np.bool_],
               ) -> tuple[Ints, Floats, Floats, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """(rowids, lower bounds, upper bounds, whether the lower bound is the exact score,
        whether it was seen in a single-lexeme term) of every document seen; `exact[slot]`
        says which terms are single lexemes."""
        if not self.rowids:
            empty, no = np.zeros(0), np.zeros(0, dtype=bool)
            return np.zeros(0, dtype=np.int64), empty, empty, no, no
        rowids = self._cat(self.rowids)
        docs, at = _distinct(rowids)
        slots = self._cat(self.slots)
        lower = np.bincount(at, weights=self._cat(self.exact), minlength=len(docs))
        phrase = np.bincount(at, weights=self._cat(self.bound), minlength=len(docs))
        self.last = at, slots, phrase.astype(np.float64, copy=False)

        def per_doc(per_slot: Floats) -> Floats:  # summed over the terms each doc was seen in
            summed: Floats = np.bincount(at, weights=per_slot[slots], minlength=len(docs)).astype(
                np.float64, copy=False)
            return summed

        # A document has one posting per term at most (one per lexeme), so sums over the
        # postings read count the terms it was seen in (no docs x terms matrix).
        unseen = np.maximum(float(unread.sum()) - per_doc(unread), 0.0)
        upper: Floats = ((lower + phrase + unseen) * (1 + SLACK)).astype(np.float64, copy=False)
        # Exact: seen in every term that has postings left to read, and in no phrase term
        # (whose weight read is only a bound).
        left = (unread > 0).astype(np.float64)
        known = (per_doc(left) == left.sum()) & (per_doc((~exact).astype(np.float64)) == 0)
        held = per_doc(exact.astype(np.float64)) > 0
        return docs, lower.astype(np.float64), upper, known, held


    def totals(self, exact: npt.NDArray[np.bool_]) -> tuple[
            Ints, Floats, Floats, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """(rowids, sums of the exact weights, sums of the phrase bounds, whether seen in
        a single-lexeme term, whether seen in a phrase term) of every document seen, in
        one pass: all that a read of every posting needs (bounds() takes several);
        `exact[slot]` as in bounds()."""
        if not self.rowids:
            no = np.zeros(0, dtype=bool)
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), no, no
        if exact.all():  # no phrase term
            return _sums(self._cat(self.rowids), self._cat(self.exact), None, None)
        return _sums(self._cat(self.rowids), self._cat(self.exact), self._cat(self.bound),
                     exact[self._cat(self.slots)])

    def where(self, places: Ints) -> tuple[Floats, Floats, npt.NDArray[np.bool_]]:
        """Of the documents at `places` of the last bounds(): the phrase bounds read, the
        length, and which terms each was seen in (len(places) x n_terms)."""
        assert self.last is not None
        at, slots, phrase = self.last
        pos = np.full(len(phrase), -1, dtype=np.int64)
        pos[places] = np.arange(len(places))
        mine = pos[at]
        sel = mine >= 0
        dl = np.ones(len(places))
        dl[mine[sel]] = self._cat(self.lengths)[sel]
        seen = np.zeros((len(places), self.n_terms), dtype=bool)
        seen[mine[sel], slots[sel]] = True
        return phrase[places], dl, seen


def unread_by_length(term: TermPlan, weights: tuple[float, float]) -> Floats:
    """The highest weighted tf among the term's unread buckets of each length class (128
    classes), each class taking its neighbours' too, so that a length rounded into the
    next class at an edge is still covered; 0 where there is none."""
    best = np.zeros(130)
    rest = term.buckets[term.read:]
    np.maximum.at(best, rest % 128 + 1, _tf_hi(rest, weights))
    out: Floats = np.maximum(np.maximum(best[:-2], best[1:-1]), best[2:])
    return out


def length_unseen_bound(terms: list[TermPlan], weights: tuple[float, float], avgdl: float) -> float:
    """The best score a document not seen yet could have, knowing that its postings of
    every term sit in buckets of its one length class: at most unseen_bound(terms)."""
    if not terms:
        return 0.0
    lo = _dl_lo(np.arange(128))
    total = sum(t.idf * saturation(unread_by_length(t, weights), lo, avgdl) for t in terms)
    return min(float(np.max(total)) * (1 + SLACK), unseen_bound(terms))


def length_upper(terms: list[TermPlan], weights: tuple[float, float], avgdl: float,
                 read: Floats, dl: Floats, seen: npt.NDArray[np.bool_]) -> Floats:
    """Upper bounds of documents of known length `dl` with weights (or phrase bounds)
    `read` summed over the terms they were `seen` in: each term not seen can add at most
    its best unread bucket of the document's length class, weighed at that length (a
    tighter bound than the best unread bucket of any length)."""
    dl_class = np.minimum(127, np.floor(2 * np.log(np.maximum(dl, 1.0)) / np.log(2.0))).astype(np.int64)
    upper = read.astype(np.float64, copy=True)
    for j, t in enumerate(terms):
        tf = unread_by_length(t, weights)[dl_class]
        upper += np.where(seen[:, j], 0.0, t.idf * saturation(tf, dl, avgdl))
    out: Floats = upper * (1 + SLACK)
    return out


def _sums(rowids: Ints, weights: Floats, bounds: Floats | None,
          exact: npt.NDArray[np.bool_] | None,
          ) -> tuple[Ints, Floats, Floats, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The distinct rowids ascending; per rowid the sums of `weights` and of `bounds`
    (zeros when None), each summed in the order given (as np.bincount over _distinct's
    places), and whether it has a posting marked `exact`, and one not (None: all are).
    Dense rowids are summed in a table of their range, without telling the distinct ones
    apart first."""
    low, high = int(rowids.min()), int(rowids.max())
    dense = low >= 0 and high - low <= 4 * len(rowids) + 65_536
    if dense:
        at, size = rowids - low, high - low + 1
    else:
        docs, at = _distinct(rowids)
        size = len(docs)
    lower: Floats = np.bincount(at, weights=weights, minlength=size).astype(np.float64, copy=False)
    held = np.zeros(size, dtype=bool)
    phrased = np.zeros(size, dtype=bool)
    phrase: Floats = np.zeros(size)
    if exact is None:
        held[at] = True
    else:
        held[at[exact]] = True
        phrased[at[~exact]] = True
    if bounds is not None:
        phrase = np.bincount(at, weights=bounds, minlength=size).astype(np.float64, copy=False)
    if not dense:
        return docs, lower, phrase, held, phrased
    places = np.flatnonzero(held | phrased if exact is not None else held)
    return (places + low).astype(np.int64, copy=False), lower[places], phrase[places], \
        held[places], phrased[places]


def _distinct(rowids: Ints) -> tuple[Ints, Ints]:
    """np.unique(rowids, return_inverse=True): the distinct rowids ascending and each
    posting's place among them. Rowids are dense (an identity column), so when their range
    is not much wider than the postings read, marking them in a table of the range and
    counting replaces the sort (a sort of 100,000 postings was a tenth of a query)."""
    if len(rowids) == 0:
        return rowids, np.zeros(0, dtype=np.int64)
    low, high = int(rowids.min()), int(rowids.max())
    if low < 0 or high - low > 8 * len(rowids) + 65_536:
        unique, inverse = np.unique(rowids, return_inverse=True)
        return unique.astype(np.int64, copy=False), inverse.astype(np.int64, copy=False)
    marked = np.zeros(high - low + 1, dtype=bool)
    marked[rowids - low] = True
    place = np.cumsum(marked, dtype=np.int64) - 1
    docs: Ints = (np.flatnonzero(marked) + low).astype(np.int64, copy=False)
    at: Ints = place[rowids - low]
    return docs, at


def threshold(lower: Floats, passing: npt.NDArray[np.bool_], k: int) -> float:
    """The k-th best lower bound among documents that pass the filters (0 if fewer)."""
    ok = lower[passing]
    if len(ok) < k:
        return 0.0
    return float(np.partition(ok, len(ok) - k)[len(ok) - k])


def unseen_bound(terms: list[TermPlan]) -> float:
    """The best score a document not seen yet could have."""
    return sum(t.unread_bound for t in terms)


def best(lower: Floats, pool: npt.NDArray[np.bool_], n: int) -> Ints:
    """The places of the `n` documents of `pool` with the best lower bounds, best first."""
    places = np.flatnonzero(pool)
    if len(places) > n:
        places = places[np.argpartition(-lower[places], n - 1)[:n]]
    order: Ints = places[np.argsort(-lower[places], kind="stable")].astype(np.int64, copy=False)
    return order


def essential_top(terms: list[tuple[Ints, Floats, float]], excluded: Ints, k: int,
                  ) -> tuple[Ints, Floats]:
    """MaxScore over terms whose every posting is at hand (Turtle & Flood 1995): the
    documents whose score reaches the k-th best score among those not `excluded` (sorted),
    with their scores. `terms[slot]` = (rowids, weights, the largest weight), single-lexeme
    terms.

    The documents of the terms with the largest weights (enough of them for k), summed over
    those terms, give a threshold; a document found only in terms whose largest weights sum
    below it cannot reach the k-th score, so only the documents of the other terms
    ("essential") are scored; when none can be left out, every document is. Scores add the
    terms' weights in slot order, as the sums over every posting do (to the bit), and the
    documents are marked in a table of the rowid range (measured at 1,000,000 items on the
    benchmark's queries: 0.72x the time of Seen.totals with no term left out)."""
    order = sorted(range(len(terms)), key=lambda i: -terms[i][2])
    sizes = np.cumsum([len(terms[i][0]) for i in order])
    rest = np.cumsum([terms[i][2] for i in order][::-1])[::-1]  # rest[j]: order[j:] summed
    high = max((int(ids.max()) for ids, _, _ in terms if len(ids)), default=0)
    first = int(np.searchsorted(sizes, k)) + 1  # the fewest best terms holding k postings
    essential = len(order)
    if first < len(order):
        best = [terms[i] for i in sorted(order[:first])]
        # Their sums over the best terms only: no more than their scores, so the k-th best
        # is no more than the k-th best score (the other terms' postings are not read yet).
        docs, partial = _scored(best, [ids for ids, _, _ in best], high)
        theta = threshold(partial, ~_member(docs, excluded), k) * (1 - SLACK)
        essential = next((j for j in range(first, len(order))
                          if rest[j] * (1 + SLACK) ** 2 < theta), len(order))
    docs, scores = _scored(terms, [terms[i][0] for i in order[:essential]], high)
    passing = ~_member(docs, excluded)
    theta = threshold(scores, passing, k)
    keep = passing & (scores * (1 + SLACK) >= theta)
    return docs[keep], scores[keep]


def _scored(terms: list[tuple[Ints, Floats, float]], of: list[Ints], high: int,
            ) -> tuple[Ints, Floats]:
    """The documents holding any of `of` (rowid arrays), ascending, and their scores: each
    term's weights added in slot order. Documents are marked in a table of the rowid range
    (a byte each: a term's postings are looked up there, and only the hits placed)."""
    marked = np.zeros(high + 2, dtype=bool)
    for ids in of:
        marked[ids] = True
    docs: Ints = np.flatnonzero(marked).astype(np.int64)
    place = np.empty(high + 2, dtype=np.int32)
    place[docs] = np.arange(len(docs), dtype=np.int32)
    scores: Floats = np.zeros(len(docs))
    for ids, weights, _ in terms:
        hit = marked[ids]
        scores = scores + np.bincount(place[ids[hit]], weights=weights[hit], minlength=len(docs))
    return docs, scores


def _member(values: Ints, members: Ints) -> npt.NDArray[np.bool_]:
    """Which of `values` are in the sorted array `members`."""
    if not len(members) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(members, values), len(members) - 1)
    out: npt.NDArray[np.bool_] = members[at] == values
    return out
