"""Top-k BM25 on PostgreSQL through the impact-ordered index (migrations 003-004, topk.py).

A query costs a handful of round trips: one for the terms, their buckets, the corpus
statistics and the documents holding each phrase, pipelined with the items no search may
return (expired, stale); one per round of bucket reads (one round, in pipelined parts,
reads every posting when the terms hold at most FULL_READ: at a search's depth of 300 the
bounds would not stop the reading earlier; blocks the store's cache holds are named, not
sent: blockcache.py); one to score the last candidates exactly (their phrases, when every
one-word term has been read to the end); one to check the documents near the top against a
filter that must be checked row by row. Hits are named by rowid (the store's keys: no id
is read for the entries of a 300-deep list). Scores equal sql.text_search's (same
statistics: N, average length and df of the corpora searched), so the two paths are
interchangeable (with `exact_top`, for the best `exact_top`: the ranks below come from the
documents read, never above their scores). A filter that keeps few rows reads them first
and scores only them (`scoped`); sql.py's one statement remains the path for unfiltered
queries made only of phrases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg import sql

from ...textquery import PREFIX_TERMS, TextQuery
from ..contract import SearchArea
from . import blockcache, topk
from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

Ranked = list[tuple[int, float]]  # (rowid, score) best first: the store's keys

FIRST_BUDGET = 4000  # postings read in the first round (at least 8 per wanted result)
# A query whose terms hold at most this many postings reads them all in one round: at the
# depth a search asks (300), the rounds below read nearly every posting anyway, one
# statement and one pass of the bounds at a time (at 1,000,000 items, where the benchmark's
# queries hold 20,000 to 1,100,000 postings, one round took p50 77-85 ms against 110-128
# and the mean from 236-270 to 102-107 ms). Past it, rounds keep the memory bounded.
FULL_READ = 4_000_000
# A read of every posting goes in up to this many statements of at least PART_MIN
# postings each, the client weighing one while the server reads the next.
READ_PARTS = 4
PART_MIN = 50_000
_CHECK_CHUNK = 4  # documents checked against the filters: this many times k at first
# A selective filter's kept rows are scored from their tsvectors when there are fewer than
# the query's postings over this; else from the postings (scoped; measured
# 2026-11-27, git history of docs/benchmarks.md).
SCOPED_POSTINGS_PER_ROW = 1000
MAX_UNSURE = 64  # candidates left to score one by one before the reads stop
# Early stop only: when more are left, up to this many of the likeliest (best upper
# bounds) are scored exactly, MAX_UNSURE at a time: their scores raise the threshold,
# which may leave few enough candidates to stop reading.
RESOLVE = 128
READ_CAP = 200_000  # postings read before the rest of the candidates are scored one by one
# Early stop (issue #16, `exact_top`): the stopping rule is run for the best `exact_top`
# only (those come back as the exact statement's), and the ranks below are filled from
# the documents already seen, each with a score no higher than its exact one (`tail`:
# "bounds", the weights read; "exact", scored from their tsvectors). A query whose terms
# hold at most EARLY_FULL_READ postings then reads them all in one round.
EARLY_FULL_READ = 50_000  # measured at 100,000 and 250,000 items against 8,000 and 100,000
EARLY_GROWTH = 4  # each round of the early stop reads this many times the last

# The query's first statement (issue #16, fourth pass: these were two, plus one per phrase,
# plus one for the excluded items, sent with it in one round trip): each query term's
# lexemes with the (bucket, count) pairs of the corpora searched, whether it is one lexeme,
# N and the average length and a phrase's df (counted through the GIN index, once per term).
_TERMS = """
WITH t AS MATERIALIZED (
    SELECT a.ord, numnode(x.q) AS nodes,
           tsvector_to_array(to_tsvector('english', a.term)) AS lexemes,
           CASE WHEN numnode(x.q) > 1 THEN (
               SELECT coalesce(array_agg(i.rowid), '{{}}') FROM items i
               WHERE {in_corpora} AND i.tsv @@ x.q) END AS phrase_rows
    FROM unnest(%s::text[]) WITH ORDINALITY AS a (term, ord)
    CROSS JOIN LATERAL phraseto_tsquery('english', a.term) AS x (q)
    WHERE numnode(x.q) > 0
), s AS (
    SELECT coalesce(sum(n_docs), 0)::float8 AS n,
           greatest(coalesce(sum(total_len)::float8 / nullif(sum(n_docs), 0), 1), 1) AS avgdl
    FROM corpus_stats WHERE {stats_in_corpora}
), k AS (
    SELECT t.ord, l.lexeme COLLATE "C" AS lexeme, c.bucket, c.n
    FROM t CROSS JOIN LATERAL unnest(t.lexemes) AS l (lexeme)
    LEFT JOIN LATERAL (
        SELECT b.bucket, sum(b.n)::bigint AS n FROM bm25_blocks b
        WHERE b.lexeme = l.lexeme AND {buckets_in_corpora}
        GROUP BY b.bucket HAVING sum(b.n) > 0
    ) AS c ON true
)
SELECT k.ord, t.nodes, k.lexeme, k.bucket, k.n, s.n AS n_docs, s.avgdl,
       CASE WHEN row_number() OVER (PARTITION BY k.ord) = 1 THEN array_send(t.phrase_rows) END
FROM k JOIN t USING (ord) CROSS JOIN s
"""
# The postings of the buckets read, block by block, as binary arrays serialized when the
# block was written (`packed`, migration 006: array_send at read time was most of the
# statement's server time): numpy weighs them (weighing each posting in SQL, unnested,
# cost 80% of a query at 100,000 items).
_READ = """
SELECT r.slot, b.n, b.packed
FROM unnest(%s::text[], %s::int[], %s::int[]) AS r (lexeme, bucket, slot)
JOIN bm25_blocks b ON b.lexeme = r.lexeme AND b.bucket = r.bucket
WHERE {in_corpora} AND b.rowids IS NOT NULL
"""
# Items that no search may return (expired, stale), found through partial indexes.
_EXCLUDED = """
SELECT array_send(coalesce(array_agg(i.rowid), '{{}}'::bigint[])) FROM items i
WHERE {in_corpora} AND ({excluded})
"""
_CHECK = "SELECT i.rowid, {ok} FROM items i WHERE i.rowid = ANY(%s)"
# Every row a selective filter keeps (_Run.scoped), found through the filters' indexes.
_KEPT = "SELECT i.rowid FROM items i WHERE {in_corpora} AND {ok}"
# Exact term counts of candidates, as sql.text_search computes them.
_SCORE = "WITH " + q.terms_cte("unnest(%s::text[], %s::int[])") + """
SELECT m.rowid, length(m.tsv), t.ord, {n}, {n_title}
FROM (SELECT i.rowid, i.tsv || ''::tsvector AS tsv FROM items i WHERE i.rowid = ANY(%s)) AS m
JOIN t ON m.tsv @@ t.q
"""


def _fmt(template: str, area: SearchArea, alias: str, **parts: sql.Composable,
         ) -> tuple[sql.Composed, list[Any]]:
    clause, params = q._in_corpora(f"{alias}.corpus", area.corpora)
    return sql.SQL(template).format(in_corpora=clause, **parts), params


_ELEMENT = {"i": ">i8", "f": ">f8", "i2": ">i2", "i4": ">i4"}


def _elements(data: bytes, kind: str) -> Any:
    """The elements of binary arrays without NULLs (array_send, headers dropped) as a
    numpy array: bigint ("i"), float8 ("f"), smallint ("i2") or integer ("i4")."""
    dtype = np.dtype([("len", ">i4"), ("v", _ELEMENT[kind])])
    return np.frombuffer(data, dtype=dtype)["v"].astype(np.float64 if kind == "f" else np.int64)


def _array(data: bytes | None, kind: str) -> Any:
    """A one-dimensional binary array without NULLs (array_send) as a numpy array."""
    header = blockcache.ARRAY_HEADER
    return _elements(data[header:] if data and len(data) > header else b"", kind)


def _parts(sizes: list[int], most: int, least: int) -> list[list[int]]:
    """The indexes of `sizes` in at most `most` runs of consecutive ones, each (but the
    last) about an equal share and at least `least` of their sum."""
    total = sum(sizes)
    count = max(1, min(most, total // max(least, 1)))
    parts: list[list[int]] = [[]]
    done = 0
    for i, size in enumerate(sizes):
        if parts[-1] and done >= total * len(parts) / count and len(parts) < count:
            parts.append([])
        parts[-1].append(i)
        done += size
    return [part for part in parts if part]


def expand_prefixes(conn: Connection[Any], query: TextQuery,
                    corpora: Sequence[str] | None) -> TextQuery:
    """The query with each prefix replaced by its PREFIX_TERMS most frequent words."""
    extra: list[tuple[str, ...]] = []
    for prefix in query.prefixes:
        statement, params = q.prefix_words(prefix, corpora, PREFIX_TERMS)
        extra.extend((str(row[0]),) for row in conn.execute(statement, params).fetchall())
    return query.with_terms(extra)


def _within(values: Any, members: Any) -> Any:
    """Which of `values` are in the sorted array `members`."""
    if not len(members):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(members, values), len(members) - 1)
    return members[at] == values


def search(conn: Connection[Any], terms: Sequence[str], area: SearchArea, limit: int,
           weights: tuple[float, float], exact_top: int | None = None,
           tail: str = "bounds", blocks: blockcache.BlockCache | None = None,
           scoped: bool = False) -> Ranked | None:
    """The BM25 top `limit` over the OR of `terms`, or None when this query is better
    answered by scoring every match (sql.text_search). Exact to the full depth, or, with
    `exact_top`, exact for the best `exact_top` and filled below from the documents seen
    (scores by `tail`, never above the exact ones). `blocks` keeps the index's blocks read
    (blockcache.py). `scoped` (a filter that keeps few rows): the rows the filters keep
    are read first and only they are scored, exactly, with the statistics of the corpora
    (df from the index; _Run.scoped)."""
    early = exact_top is not None and exact_top < limit
    stats_in, stats_params = q._in_corpora("corpus", area.corpora)
    buckets_in, buckets_params = q._in_corpora("b.corpus", area.corpora)
    items_in, items_params = q._in_corpora("i.corpus", area.corpora)
    statement = sql.SQL(_TERMS).format(
        in_corpora=items_in, stats_in_corpora=stats_in, buckets_in_corpora=buckets_in)
    excluded = _Excluded(area) if not (area.filters.needs_row_filter or area.match) else None
    # One round trip: the terms and the excluded items.
    with conn.pipeline():
        cur = conn.cursor(binary=True).execute(statement, [
            *items_params, list(terms), *stats_params, *buckets_params])
        if excluded is not None:
            excluded.send(conn)
    rows = cur.fetchall()
    excluded_rowids = excluded.result() if excluded is not None else None
    if not rows:
        return []
    n_docs, avgdl = float(rows[0][5]), float(rows[0][6])
    by_term: dict[int, dict[str, list[tuple[int, int]]]] = {}
    single: dict[int, bool] = {}
    phrase_rows: dict[int, topk.Ints] = {}  # the documents holding each phrase
    for ord_, nodes, lexeme, bucket, count, _n, _a, members in rows:
        by_term.setdefault(ord_, {}).setdefault(lexeme, [])
        single[ord_] = nodes == 1
        if members is not None:
            phrase_rows[ord_] = np.sort(_array(members, "i"))
        if bucket is not None:
            by_term[ord_][lexeme].append((int(bucket), int(count)))
    plans: list[topk.TermPlan] = []
    for ord_, lexemes in sorted(by_term.items()):
        dfs = {lx: sum(c for _, c in bs) for lx, bs in lexemes.items()}
        proxy = min(dfs, key=lambda lx: (dfs[lx], lx))
        if dfs[proxy] == 0:
            continue  # no document holds it
        df = dfs[proxy] if single[ord_] else len(phrase_rows.get(ord_, ()))
        if df == 0:
            continue
        buckets = np.array([b for b, _ in lexemes[proxy]], dtype=np.int64)
        counts = np.array([c for _, c in lexemes[proxy]], dtype=np.int64)
        plans.append(topk.plan_term(ord_, proxy, single[ord_], topk.idf(n_docs, df), buckets,
                                    counts, weights, avgdl))
    if not plans:
        return []
    if not scoped and not any(p.exact for p in plans):
        return None
    run = _Run(conn, terms, plans, area, limit, weights, avgdl, excluded_rowids)
    if blocks is not None:
        run.blocks = blocks
    run.members = [None if p.exact else phrase_rows.get(p.ord) for p in plans]
    if scoped:
        return run.scoped()
    if early:
        run.exact_top, run.tail = max(1, exact_top or 1), tail
    return run.run()


class _Excluded:
    """The items no search may return (expired, stale), found through partial indexes."""

    def __init__(self, area: SearchArea) -> None:
        f = area.filters
        parts, self.params = [], []
        if not f.include_expired:
            parts.append("(i.expires_at IS NOT NULL AND i.expires_at <= %s)")
            self.params.append(area.now)
        if not f.include_stale:
            parts.append("i.stale")
        self.statement: sql.Composed | None = None
        if parts:
            self.statement, corpus_params = _fmt(_EXCLUDED, area, "i",
                                                 excluded=sql.SQL(" OR ".join(parts)))
            self.params = [*corpus_params, *self.params]
        self.cursor: Any = None

    def send(self, conn: Connection[Any]) -> None:
        if self.statement is not None:
            self.cursor = conn.cursor(binary=True).execute(self.statement, self.params)

    def result(self) -> Any:
        if self.cursor is None:
            return np.zeros(0, dtype=np.int64)
        row = self.cursor.fetchone()
        return _array(row[0] if row else None, "i")


class _Run:
    """One top-k query: reads buckets until the k-th lower bound beats every unseen doc."""

    def __init__(self, conn: Connection[Any], terms: Sequence[str], plans: list[topk.TermPlan],
                 area: SearchArea, limit: int, weights: tuple[float, float], avgdl: float,
                 excluded: Any = None) -> None:
        self.conn, self.terms, self.plans, self.area = conn, terms, plans, area
        self.limit, self.weights, self.avgdl = limit, weights, avgdl
        self.seen = topk.Seen(len(plans))
        self.exact = np.array([p.exact for p in plans], dtype=bool)
        self.checked: dict[int, bool] = {}  # rowid -> passes the filters (checked row by row)
        ok, self.ok_params = q.filter_sql(area, corpus=False)
        self.ok_sql = sql.SQL("({})").format(ok)  # finds rows (scoped): containment too
        ok_row, self.ok_row_params = q.filter_sql(area, corpus=False, indexed=False)
        self.check_sql = sql.SQL(_CHECK).format(ok=sql.SQL("({})").format(ok_row))
        self.read_sql, self.read_params = _fmt(_READ, area, "b")
        self.read_all_sql, _ = _fmt(blockcache.READ_ALL, area, "b")
        self.blocks = blockcache.BlockCache(0)  # blocks across searches (none kept: 0)
        self.scope = ""  # the blocks' (blockcache.read_all)
        self.at_hand: dict[int, tuple[topk.Ints, topk.Floats, float]] = {}  # slot: all postings
        # Rowids no search may return, when that set is known (no other filter): then every
        # other document passes and none is checked.
        self.excluded: Any = excluded
        self.kept: topk.Ints | None = None  # every rowid the filters keep, sorted (scoped)
        self.exact_top, self.tail = limit, "exact"  # the early stop's (exact_top < limit)
        self.postings = 0  # read so far
        self.scored: dict[int, float] = {}  # rowid -> exact score, scored before the end
        # Per term, for a phrase, the documents holding it (sorted): its proxy's postings
        # of other documents are dropped, so only those can be unsure of their phrase part.
        self.members: list[topk.Ints | None] = [None] * len(plans)

    def run(self) -> Ranked:
        total = sum(int(p.counts.sum()) for p in self.plans)
        k = self.exact_top
        early = k < self.limit
        one_round = total <= (EARLY_FULL_READ if early else FULL_READ)
        if one_round and not early:
            return self._all_read()
        budget = max(FIRST_BUDGET, 8 * k)
        while True:
            self.postings += self._read_all() if one_round else self._read(
                topk.next_reads(self.plans, budget))
            budget *= EARLY_GROWTH if early else 4
            unread = np.array([p.unread_bound for p in self.plans])
            docs, lower, upper, known, held = self.seen.bounds(unread, self.exact)
            self._known_scores(docs, lower, upper, known)
            passing, possible = self._passing(docs, lower)
            theta = topk.threshold(lower, passing, k)
            if not unread.any() or topk.length_unseen_bound(
                    self.plans, self.weights, self.avgdl) < theta:
                # The tail is filled from the documents seen: read on until there are enough.
                if early and unread.any() and int((passing & held).sum()) < self.limit:
                    continue
                cands = possible & (upper >= theta)
                unsure = int((cands & ~known).sum())
                if unsure > MAX_UNSURE and unread.any():  # tighter bounds where it matters
                    places = np.flatnonzero(cands & ~known)
                    phrase, dl, seen = self.seen.where(places)
                    upper[places] = topk.length_upper(self.plans, self.weights, self.avgdl,
                                                      lower[places] + phrase, dl, seen)
                    cands = possible & (upper >= theta)
                    unsure = int((cands & ~known).sum())
                if early and unsure > MAX_UNSURE and unread.any() and len(self.scored) < RESOLVE:
                    # Score the likeliest exactly: their scores can raise the threshold.
                    places = np.flatnonzero(cands & ~known)
                    places = places[np.argsort(-upper[places], kind="stable")[:MAX_UNSURE]]
                    rowids = [int(r) for r in docs[places]]
                    found = self._score(rowids)
                    # One that holds no term (seen through a phrase's word only) stays
                    # unsure with a bound of 0: if it ever is a candidate, _finish drops it.
                    self.scored.update((r, found.get(r, -1.0)) for r in rowids)
                    self._known_scores(docs, lower, upper, known)
                    passing, possible = self._passing(docs, lower)
                    theta = topk.threshold(lower, passing, k)
                    cands = possible & (upper >= theta)
                    unsure = int((cands & ~known).sum())
                # Reading on is cheaper than scoring many documents one by one.
                if unsure <= MAX_UNSURE or not unread.any() or self.postings > READ_CAP:
                    if not early:
                        return self._finish(docs[cands], lower[cands], known[cands], held[cands],
                                            self.limit)
                    # The tail's documents: the best lower bounds outside the candidates
                    # (their ids come with the candidates', in one statement).
                    pick = topk.best(lower, passing & held & ~cands, self.limit - k)
                    ranked = self._finish(docs[cands], lower[cands], known[cands], held[cands],
                                          self.limit, also=docs[pick])
                    return self._fill(ranked, docs[pick], lower[pick])

    def _all_read(self) -> Ranked:
        """Every posting read in one statement: no bound is left to tighten, so each
        document's sum of weights is its score (a phrase's part a bound, confirmed at the
        end). Seen.bounds would give the same candidates in several more passes."""
        self.postings = self._read_all()
        if self.excluded is not None and self.exact.all() and len(self.at_hand) == len(self.plans):
            docs, scores = topk.essential_top([self.at_hand[i] for i in range(len(self.plans))],
                                              np.sort(self.excluded), self.limit)
            known = np.ones(len(docs), dtype=bool)  # every candidate scored exactly, held
            return self._finish(docs, scores, known, known, self.limit)
        docs, lower, phrase, held, phrased = self.seen.totals(self.exact)
        passing, possible = self._passing(docs, lower)
        theta = topk.threshold(lower, passing, self.limit)
        cands = possible & ((lower + phrase) * (1 + topk.SLACK) >= theta)
        return self._finish(docs[cands], lower[cands], ~phrased[cands], held[cands],
                            self.limit)

    def _known_scores(self, docs: topk.Ints, lower: topk.Floats, upper: topk.Floats,
                      known: Any) -> None:
        """Put the exact scores of the documents scored so far into their bounds."""
        if not self.scored:
            return
        rowids = np.fromiter(self.scored, dtype=np.int64, count=len(self.scored))
        at = np.minimum(np.searchsorted(docs, rowids), max(len(docs) - 1, 0))
        hit = docs[at] == rowids if len(docs) else np.zeros(0, dtype=bool)
        scores = np.fromiter(self.scored.values(), dtype=np.float64, count=len(self.scored))
        at, scores = at[hit], scores[hit]
        lower[at] = upper[at] = np.maximum(scores, 0.0)
        known[at] = scores >= 0

    def _fill(self, ranked: Ranked, docs: topk.Ints, lower: topk.Floats) -> Ranked:
        """The best `exact_top` of the candidates (exact), then the ranks below from the
        other candidates (exact) and the tail's documents `docs` (seen outside the
        candidates, best lower bounds first), scored by their `lower` bounds or exactly
        (`tail`)."""
        top = ranked[: self.exact_top]
        if len(top) < self.exact_top:
            return ranked
        rowids = [int(r) for r in docs]
        if self.tail == "exact":
            found = self._score(rowids)
            scores = {r: found.get(r, 0.0) for r in rowids}
        else:
            scores = dict(zip(rowids, (float(x) for x in lower), strict=True))
        self._check(rowids)
        rest = sorted([*ranked[self.exact_top:], *((r, s) for r, s in scores.items()
                                                   if self._passes(r))],
                      key=lambda hit: (-hit[1], hit[0]))
        return [*top, *rest][: self.limit]

    def _read_all(self) -> int:
        """Read every block of the terms: only those `blocks` does not hold come with their
        postings (blockcache.py). The terms go in up to READ_PARTS statements of about
        equal postings to send, sent at once (a pipeline)."""
        for p in self.plans:
            p.read = len(p.buckets)
        self.scope, by_slot = blockcache.read_all(
            self.conn, self.blocks, self.read_all_sql, self.read_params,
            [p.lexeme for p in self.plans], [int(p.counts.sum()) for p in self.plans],
            lambda sizes: _parts(sizes, READ_PARTS, PART_MIN))
        return self._weigh([(slot, key, block) for slot, got in sorted(by_slot.items())
                            for key, block in got])

    def _read(self, reads: list[tuple[topk.TermPlan, int]]) -> int:
        if not reads:
            return 0
        slot_of = {id(p): i for i, p in enumerate(self.plans)}
        # Binary results: bytea in text form is hex, twice the bytes to send and decode.
        rows = self.conn.cursor(binary=True).execute(self.read_sql, [
            [p.lexeme for p, _ in reads], [b for _, b in reads],
            [slot_of[id(p)] for p, _ in reads], *self.read_params]).fetchall()
        return self._weigh([(slot, None, blockcache.Block.parse(packed, n))
                            for slot, n, packed in rows if n])

    def _weigh(self, rows: list[Any]) -> int:
        """Weigh the postings of the blocks read ((slot, key, block) rows; keys of
        `self.scope` when every block of a term was read, else None); how many."""
        blocks: dict[int, list[tuple[str | None, blockcache.Block]]] = {}
        for slot, key, block in rows:
            blocks.setdefault(slot, []).append((key, block))
        read = 0
        for slot, parts in blocks.items():  # Seen sums them in term order, whatever this one
            plan = self.plans[slot]
            ids, weight, dl, most = blockcache.term_postings(
                self.blocks, self.scope, parts, plan.idf, self.weights, self.avgdl)
            read += len(ids)
            members = self.members[slot]
            if members is not None:  # a phrase: only the documents that hold it
                keep = _within(ids, members)
                ids, weight, dl = ids[keep], weight[keep], dl[keep]
            self.at_hand[slot] = (ids, weight, most)
            self.seen.add(slot, ids, weight, plan.exact, dl)
        return read

    def _passing(self, docs: topk.Ints, lower: topk.Floats) -> tuple[Any, Any]:
        """Which documents seen pass the filters for sure, and which may: all but the
        excluded set when it is known; else checked row by row from the best lower bound
        down until k pass (the unchecked ones may pass, and are checked if they become
        candidates)."""
        if self.excluded is not None:
            passing = ~np.isin(docs, self.excluded)
            return passing, passing
        if self.kept is not None:
            passing = _within(docs, self.kept)
            return passing, passing
        order = np.argsort(-lower, kind="stable")
        want = _CHECK_CHUNK * self.limit
        while True:
            self._check(docs[order[:want]])
            if want >= len(order):
                break
            if sum(self.checked[int(r)] for r in docs[order[:want]]) >= self.limit:
                break
            want *= 2
        passing = np.zeros(len(docs), dtype=bool)
        possible = np.ones(len(docs), dtype=bool)
        top = order[:want]
        passing[top] = possible[top] = [self.checked[int(r)] for r in docs[top]]
        return passing, possible

    @property
    def _sets_known(self) -> bool:
        """Whether the filters are known as sets of rowids (the excluded ones, or the kept
        ones: `_passing`), so that no document is checked row by row."""
        return self.excluded is not None or self.kept is not None

    def _check(self, rowids: Sequence[int] | topk.Ints) -> None:
        """Check these documents against the filters, row by row (those not checked yet;
        none when `_sets_known`)."""
        if self._sets_known:
            return
        todo = [int(r) for r in rowids if int(r) not in self.checked]
        if todo:
            for rowid, ok in self.conn.execute(self.check_sql, [*self.ok_row_params, todo]):
                self.checked[int(rowid)] = bool(ok)
            for r in todo:  # gone (cannot happen within one snapshot; never return it)
                self.checked.setdefault(r, False)

    def _passes(self, rowid: int) -> bool:
        """Whether a candidate may be returned: with the excluded set (or the kept rows)
        known, every candidate is outside it (inside them: _passing); else as checked."""
        if self._sets_known:
            return True
        return self.checked[rowid]

    def scoped(self) -> Ranked:
        """The exact statement's answer for a filter that keeps few rows, without scoring
        the rows it drops (that statement scores every match in the corpora to count df,
        which the index already holds). The kept rows are read first (through the
        indexes); few are scored from their tsvectors, more from the terms' postings
        with every other document dropped (a row's tsvector costs about as much as
        SCOPED_POSTINGS_PER_ROW postings)."""
        statement, corpus_params = _fmt(_KEPT, self.area, "i", ok=self.ok_sql)
        rows = self.conn.execute(statement, [*corpus_params, *self.ok_params],
                                 prepare=False).fetchall()  # planned for the values
        if not rows:
            return []
        self.checked.update((int(r), True) for (r,) in rows)
        postings = sum(int(p.counts.sum()) for p in self.plans)
        if len(rows) * SCOPED_POSTINGS_PER_ROW > postings:
            self.kept = np.sort(np.array([int(r) for (r,) in rows], dtype=np.int64))
            return self.run()
        scores = self._score(list(self.checked))
        ranked = sorted(((r, s) for r, s in scores.items()),
                        key=lambda hit: (-hit[1], hit[0]))
        return ranked[: self.limit]

    def _finish(self, docs: topk.Ints, lower: topk.Floats, known: Any, held: Any,
                limit: int, also: topk.Ints | None = None) -> Ranked:
        """Exact scores of the candidates; the best `limit` passing the filters, ties by
        rowid (`also`: documents checked against the filters with them)."""
        scores = dict(zip((int(r) for r in docs), (float(x) for x in lower), strict=True))
        unsure = [int(r) for r in docs[~known]]
        if unsure:
            # Every single-lexeme term read to the end: their weights are known, and only
            # the phrases need scoring (from the tsvectors, the costly part); else all terms.
            partial = all(p.read == len(p.buckets) for p in self.plans if p.exact)
            found = self._score(unsure, phrases_only=partial)
            held_by = dict(zip((int(r) for r in docs[~known]), held[~known], strict=True))
            for r in unsure:
                if r in found:
                    scores[r] = scores[r] + found[r] if partial else found[r]
                elif not (partial and held_by[r]):  # held none of the query's terms
                    del scores[r]
        self._check([*scores, *(int(r) for r in (() if also is None else also))])
        ranked = sorted(((r, s) for r, s in scores.items() if self._passes(r)),
                        key=lambda hit: (-hit[1], hit[0]))
        return ranked[: limit]

    def _score(self, rowids: list[int], *, phrases_only: bool = False) -> dict[int, float]:
        """Exact BM25 of those of these documents that hold some term (or some phrase term:
        their phrases' part of it)."""
        n = q._term_frequency("{1,1,1,1}")
        n_title = q._term_frequency("{0,0,0,1}")
        statement = sql.SQL(_SCORE).format(n=n, n_title=n_title)
        slots = [i for i, p in enumerate(self.plans) if not (phrases_only and p.exact)]
        rows = self.conn.execute(statement, [
            [self.terms[self.plans[i].ord - 1] for i in slots], slots, rowids]).fetchall()
        scores: dict[int, float] = {}
        for rowid, dl, slot, count, title in rows:
            tf = self.weights[0] * float(title) + self.weights[1] * (float(count) - float(title))
            scores[int(rowid)] = scores.get(int(rowid), 0.0) + self.plans[slot].idf * float(
                topk.saturation(np.array([tf]), np.array([float(dl)]), self.avgdl)[0])
        return scores
