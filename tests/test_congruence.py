"""Congruence: the same items and the same `kb.search` calls on SQLite and on PostgreSQL.

Every mode x fusion x filter kind runs on both stores and the answers are compared.

- In one corpus the two backends' BM25 statistics agree: N, the average length and a
  term's document frequency all span the corpus on both, filters only decide which
  rows come back. So every mode, fusion and filter gives the same ids with the same
  scores (hits whose scores tie within float noise compare as a set).
- With several corpora both take document frequencies and N from the corpora searched
  (SQLite boosts each term by scoped over whole-index idf, text_scope.py), but SQLite's
  average length stays the whole index's, so scores differ a little. A search of one
  corpus of two ranks the same ids in the same order on both (12 of 12 queries here;
  7 of 12 before the statistics were scoped). Vector answers stay identical; full-text
  and hybrid rankings must share at least `MIN_OVERLAP` of each top 10 and
  `MEAN_OVERLAP` on average. Measured on this corpus: full text 1.0 (the same ids,
  other scores), hybrid min 0.8 / mean 0.96 (convex), 0.9 / 0.99 (DBSF), 1.0 (RRF).

The corpus is built so that tokenizing agrees: made-up consonant-vowel words that
neither Porter (FTS5) nor Snowball (PostgreSQL) stems and no stopword list holds, each
at most once per text, so a document's length is the same count on both.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MIGRATED_DB, PgDatabases

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase, SearchResult
from hybridkb.fusion import FUSIONS
from hybridkb.model import MODES

N_ITEMS = 200
N_SIDE = 40
LIMIT = 10
MIN_OVERLAP = 0.7  # of one top 10, full text and hybrid over several corpora
MEAN_OVERLAP = 0.9  # over the queries
T0 = 1_700_000_000.0  # created_at of the first item; one hour apart after it
HOUR = 3600.0

KINDS = ("decision", "lesson", "memory", "wiki_page")


def vocabulary() -> list[str]:
    rng = random.Random(7)
    words: set[str] = set()
    while len(words) < 150:
        words.add("".join(rng.choice(c) for c in ("bdfgklmnpvz", "aou", "bdgkmnpt", "aou", "bdgkmnpt")))
    return sorted(words)


WORDS = vocabulary()


def text(rng: random.Random) -> str:
    # a Zipf-like draw: common words make long posting lists, rare ones sharp ones
    weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]
    picked: list[str] = []
    while len(picked) < rng.randint(4, 18):
        word = rng.choices(WORDS, weights)[0]
        if word not in picked:
            picked.append(word)
    return " ".join(picked)


def items(corpus: str, n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{
        "id": f"{corpus}-{k:03d}", "corpus": corpus, "text": text(rng), "kind": KINDS[k % 4],
        "scope": f"s{k % 3}", "repo": f"r{k % 2}", "namespace": f"n{k % 5}",
        "metadata": {"team": "abc"[k % 3], "n": k % 7, "path": f"src/m{k % 4}/f{k}.{'py' if k % 2 else 'md'}",
                     "language": "python" if k % 2 else "markdown"},
        "created_at": T0 + k * HOUR,
    } for k in range(n)]


QUERIES = [" ".join(random.Random(q).sample(WORDS[:60], q % 3 + 1)) for q in range(12)]

FILTERS: dict[str, dict[str, Any]] = {
    "kind": {"kind": "decision"},
    "scope": {"scope": "s1"},
    "repo": {"repo": "r0"},
    "namespace": {"namespace": ["n0", "n3"]},
    "metadata equality": {"metadata": {"team": "a"}},
    "metadata in": {"metadata": {"n": [1, 2, 5]}},
    "time range": {"created_after": T0 + 40 * HOUR, "created_before": T0 + 150 * HOUR},
    "path glob": {"path": "src/m[12]/**/*.py"},
    "path folder": {"path": ["src/m0/", "src/m3"]},
    "language": {"language": "markdown"},
}


def open_pair(tmp: Path, pg_server: PgDatabases, name: str, content: list[dict[str, Any]], *,
              optimize: bool = False) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    """A SQLite store and a PostgreSQL one holding `content` (with `optimize`, SQLite answers
    from its committed tantivy index, not the delta); both closed and the database dropped."""
    db = f"hkb_congruence_{uuid.uuid4().hex[:10]}"
    url = pg_server.create_database(db, MIGRATED_DB)
    pair = (hybridkb.open(str(tmp / f"{name}.db"), embedder=HashingEmbedder(64)),
            hybridkb.open(url, embedder=HashingEmbedder(64)))
    try:
        for kb in pair:
            kb.add_many(content)
        if optimize:
            pair[0].optimize()
        yield pair
    finally:
        for kb in pair:
            kb.close()
        pg_server.drop_database(db)


@pytest.fixture(scope="module")
def one_corpus(tmp_path_factory: pytest.TempPathFactory,
               pg_server: PgDatabases) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    """SQLite and PostgreSQL holding the same items, all in one corpus."""
    yield from open_pair(tmp_path_factory.mktemp("congruence"), pg_server, "one",
                          items("main", N_ITEMS, 1))


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory: pytest.TempPathFactory,
                pg_server: PgDatabases) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    """The same, with a second corpus beside the first."""
    yield from open_pair(tmp_path_factory.mktemp("congruence"), pg_server, "two",
                          items("main", N_ITEMS, 1) + items("side", N_SIDE, 2))


def search(kb: KnowledgeBase, query: str, mode: str, fusion: str, **options: Any) -> SearchResult:
    return kb.search(query, mode=mode, fusion=fusion, limit=LIMIT, **options)


def assert_same(a: SearchResult, b: SearchResult, what: str) -> None:
    """Same ids with the same scores; hits whose scores tie (float noise) compare as a set."""
    assert a.answered_by == b.answered_by, what
    assert len(a.hits) == len(b.hits), what
    assert [h.score for h in a.hits] == pytest.approx([h.score for h in b.hits], rel=1e-4, abs=1e-6), what

    def groups(result: SearchResult) -> list[set[str]]:
        out: list[set[str]] = []
        last: float | None = None
        for hit in result.hits:
            if last is None or abs(last - hit.score) > 1e-5 * max(1.0, abs(last)):
                out.append(set())
            out[-1].add(hit.id)
            last = hit.score
        return out[:-1] if len(result.hits) == LIMIT else out  # a tie cut by the limit

    assert groups(a) == groups(b), what


def overlap(a: SearchResult, b: SearchResult) -> float:
    if not a.hits and not b.hits:
        return 1.0
    return len(set(a.ids) & set(b.ids)) / max(len(a.ids), len(b.ids))


def satisfies(kb: KnowledgeBase, result: SearchResult, filters: dict[str, Any]) -> None:
    for item in kb.get_many(result.ids):
        for key in ("kind", "scope", "repo", "namespace"):
            if key in filters:
                wanted = filters[key]
                assert getattr(item, key) in (wanted if isinstance(wanted, list) else [wanted])
        for mkey, mvalue in filters.get("metadata", {}).items():
            assert item.metadata[mkey] in (mvalue if isinstance(mvalue, list) else [mvalue])
        assert item.created_at is not None
        assert filters.get("created_after", -1.0) <= item.created_at <= filters.get("created_before", 1e18)


MATRIX = list(itertools.product(MODES, FUSIONS))
FILTER_KINDS = ["none", *sorted(FILTERS)]


def test_the_comparisons_can_fail(one_corpus: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    sqlite_kb, pg_kb = one_corpus
    a = search(sqlite_kb, QUERIES[0], "fts", "rrf")
    b = search(pg_kb, QUERIES[0], "fts", "rrf", filters={"repo": "r0"})
    with pytest.raises(AssertionError):
        assert_same(a, b, "a filter on one side only")
    assert overlap(a, b) < 1.0
    with pytest.raises(AssertionError):
        satisfies(sqlite_kb, a, {"repo": "r1"})


@pytest.mark.parametrize("kind", FILTER_KINDS)
@pytest.mark.parametrize(("mode", "fusion"), MATRIX)
def test_one_corpus_answers_are_identical(one_corpus: tuple[KnowledgeBase, KnowledgeBase],
                                          mode: str, fusion: str, kind: str) -> None:
    filters = FILTERS.get(kind, {})
    answered = 0
    for query in QUERIES:
        a, b = (search(kb, query, mode, fusion, filters=filters) for kb in one_corpus)
        assert_same(a, b, f"{mode}/{fusion}/{kind} {query!r}")
        satisfies(one_corpus[0], a, filters)
        answered += bool(a.hits)
    assert answered >= len(QUERIES) - 2  # the comparison is not vacuous


@pytest.mark.parametrize("corpora", [["side"], ["main", "side"], None])
@pytest.mark.parametrize(("mode", "fusion"), MATRIX)
def test_several_corpora(two_corpora: tuple[KnowledgeBase, KnowledgeBase], mode: str, fusion: str,
                         corpora: list[str] | None) -> None:
    overlaps = []
    for query in QUERIES:
        a, b = (search(kb, query, mode, fusion, corpora=corpora) for kb in two_corpora)
        assert {h.corpus for h in a.hits + b.hits} <= set(corpora or ["main", "side"])
        if mode == "vector":
            assert_same(a, b, f"vector/{fusion} {corpora} {query!r}")
        overlaps.append(overlap(a, b))
    assert min(overlaps) >= MIN_OVERLAP, overlaps
    assert sum(overlaps) / len(overlaps) >= MEAN_OVERLAP, overlaps


@pytest.mark.parametrize("corpus", ["main", "side"])
def test_one_corpus_of_two_ranks_alike(two_corpora: tuple[KnowledgeBase, KnowledgeBase],
                                       corpus: str) -> None:
    """Both backends weigh a term by its document frequency in the corpora searched, so a
    term common in the other corpus does not lose weight here."""
    same = 0
    for query in QUERIES:
        a, b = (search(kb, query, "fts", "rrf", corpora=[corpus]) for kb in two_corpora)
        assert {h.corpus for h in a.hits + b.hits} <= {corpus}
        same += a.ids == b.ids
    assert same >= len(QUERIES) - 1, same
