"""The tantivy text index on its own: analyzer, query semantics, filters inside the index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridkb.model import Filters, parse_filters
from hybridkb.storage.indexes.text import STATE_FILE, IndexUnusable, TextIndex
from hybridkb.storage.indexes.text_schema import TextDoc, meta_token
from hybridkb.storage.indexes.text_scope import idf
from hybridkb.textquery import parse

NOW = 1_700_000_000.0

DOCS = [
    TextDoc(1, "Storage decision", "We keep data in SQLite files with WAL mode.", "wiki", kind="decision",
            scope="s1", repo="r1", metadata={"path": "docs/a.md", "n": 3}, created_at=100.0,
            updated_at=100.0),
    TextDoc(2, None, "Migration migration_032 renames the columns; café crème résumé.", "code",
            kind="code", scope="s2", repo="r2", metadata={"path": "src/b.py", "flag": True},
            created_at=200.0, updated_at=300.0),
    TextDoc(3, "Caching", "Memcached sits in front of the database for hot reads.", "wiki",
            kind="lesson", scope="s1", created_at=300.0, updated_at=300.0, expires_at=NOW - 1),
    TextDoc(4, "Old note", "The database was once PostgreSQL running queries.", "wiki", kind="temp_note",
            scope="s1", stale=True, created_at=400.0, updated_at=400.0),
    TextDoc(5, None, "日本語のテキストと絵文字 🎉 in one note", "code", repo="r1", metadata={"n": 3.0}),
]


@pytest.fixture(params=["disk", "memory"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> TextIndex:
    folder = tmp_path / "kb.db.idx" / "text" if request.param == "disk" else None
    idx = TextIndex.create(folder, "store-1")
    idx.apply(DOCS, (), seq=7, fresh=True)
    return idx


def ids(index: TextIndex, query: str, filters: Filters | None = None,
        corpora: tuple[str, ...] | None = None, limit: int = 10) -> list[int]:
    return [r for r, _ in index.search(parse(query), corpora=corpora, filters=filters or Filters(),
                                       now=NOW, limit=limit)]


def test_stemming_lowercase_and_diacritics(index: TextIndex) -> None:
    assert ids(index, "DATABASES") == []  # 3 expired, 4 stale
    assert ids(index, "DATABASES", Filters(include_expired=True)) == [3]
    assert ids(index, "cafe creme") == [2]
    assert ids(index, "renaming") == [2]


def test_identifiers_and_phrases(index: TextIndex) -> None:
    assert ids(index, "migration_032") == [2]
    assert ids(index, '"WAL mode"') == [1]
    assert ids(index, '"mode WAL"') == []


def test_or_semantics_rank_more_matches_first(index: TextIndex) -> None:
    found = index.search(parse("sqlite storage memcached"), corpora=None,
                         filters=Filters(include_expired=True), now=NOW, limit=10)
    assert [r for r, _ in found] == [1, 3]
    assert found[0][1] > found[1][1] > 0


def test_title_counts_twice(tmp_path: Path) -> None:
    idx = TextIndex.create(None, "s")
    idx.apply([TextDoc(1, "zebra", "plain words here", "c"), TextDoc(2, None, "zebra plain words here", "c")],
              (), 1, fresh=True)
    assert [r for r, _ in idx.search(parse("zebra"), corpora=None, filters=Filters(), now=NOW,
                                     limit=5)] == [1, 2]


def test_stopwords_and_hostile_queries_never_raise(index: TextIndex) -> None:
    assert ids(index, "the of and") == [2]  # only stopwords: kept, as the FTS5 path does
    for q in ['"', "NEAR(", "-x", "a:b", "C++", "title:", "*", "\x00", "🎉", "日本語", "x" * 70_000]:
        index.search(parse(q), corpora=None, filters=Filters(), now=NOW, limit=5)
    assert ids(index, "日本語のテキストと絵文字") == [5]


def test_filters_run_inside_the_index(index: TextIndex) -> None:
    everything = Filters(include_expired=True, include_stale=True)
    assert set(ids(index, "database", everything)) == {3, 4}
    assert ids(index, "database") == []  # 3 expired, 4 stale
    assert ids(index, "database", Filters(include_stale=True)) == [4]
    assert ids(index, "note", corpora=("code",)) == [5]
    assert ids(index, "note", Filters(include_stale=True), corpora=("wiki",)) == [4]
    assert set(ids(index, "the sqlite migration note", parse_filters({"repo": "r1"}))) == {1, 5}
    assert ids(index, "sqlite migration", parse_filters({"kind": ["code", "lesson"]})) == [2]
    assert ids(index, "sqlite migration", parse_filters({"scope": "s1"})) == [1]
    assert ids(index, "sqlite migration", parse_filters({"namespace": "x"})) == []
    assert ids(index, "sqlite migration", parse_filters({"created_after": 150})) == [2]
    assert ids(index, "sqlite migration", parse_filters({"created_before": 200})) == [1]
    assert ids(index, "sqlite migration", parse_filters({"updated_after": 300})) == [2]


def test_metadata_filters_compare_like_json_each(index: TextIndex) -> None:
    assert ids(index, "sqlite migration", parse_filters({"metadata": {"path": "src/b.py"}})) == [2]
    assert ids(index, "sqlite migration", parse_filters({"metadata": {"flag": 1}})) == [2]
    assert ids(index, "sqlite migration", parse_filters({"metadata": {"flag": True}})) == [2]
    assert set(ids(index, "sqlite note", parse_filters({"metadata": {"n": [3]}}))) == {1, 5}
    assert ids(index, "sqlite note", parse_filters({"metadata": {"n": "3"}})) == []
    assert meta_token("k", float("nan")) is None and meta_token("k", [1]) is None


def test_filtered_scores_equal_unfiltered(index: TextIndex) -> None:
    full = dict(index.search(parse("sqlite migration"), corpora=None, filters=Filters(), now=NOW, limit=9))
    one = index.search(parse("sqlite migration"), corpora=None, filters=Filters(kinds=("code",)),
                       now=NOW, limit=9)
    assert one == [(2, full[2])]
    every = index.search(parse("sqlite migration"), corpora=("code", "wiki"), filters=Filters(),
                         now=NOW, limit=9)
    assert dict(every) == full  # the corpora hold every document: the index's statistics


def test_a_corpus_search_weighs_terms_by_that_corpus(index: TextIndex) -> None:
    """Document frequencies and N of the corpora searched, as on PostgreSQL: "migration"
    is in 1 of the 5 documents and in 1 of the 2 of corpus "code"."""
    full = dict(index.search(parse("migration"), corpora=None, filters=Filters(), now=NOW, limit=9))
    code = index.search(parse("migration"), corpora=("code",), filters=Filters(), now=NOW, limit=9)
    assert [r for r, _ in code] == [2]
    assert code[0][1] == pytest.approx(full[2] * idf(2, 1) / idf(5, 1), rel=1e-5)
    assert code[0][1] < full[2]
    stats = index.stats(parse("migration"), ("code",))
    assert stats.docs == 2 and stats.doc_freq("migrat") == 1 and stats.doc_freq("sqlite") == 0
    assert index.stats(parse("migration")).docs == 5


def test_apply_replaces_and_removes_by_rowid(index: TextIndex) -> None:
    index.apply([TextDoc(1, None, "now about kafka queues", "wiki")], [2], seq=9)
    assert index.seq == 9
    assert ids(index, "sqlite") == []
    assert ids(index, "kafka") == [1]
    assert ids(index, "migration_032") == []
    assert sorted(index.all_rowids()) == [1, 3, 4, 5]
    assert index.doc_count() == 4


def test_reopen_reads_seq_and_refuses_foreign_or_broken(tmp_path: Path) -> None:
    folder = tmp_path / "idx" / "text"
    idx = TextIndex.create(folder, "store-1")
    idx.apply(DOCS[:2], (), seq=12, fresh=True)
    again = TextIndex.open(folder, "store-1")
    assert again.seq == 12 and sorted(again.all_rowids()) == [1, 2]
    with pytest.raises(IndexUnusable, match="another store"):
        TextIndex.open(folder, "store-2")
    state = json.loads((folder / STATE_FILE).read_text())
    (folder / STATE_FILE).write_text(json.dumps({**state, "schema": -1}))
    with pytest.raises(IndexUnusable, match="format"):
        TextIndex.open(folder, "store-1")
    (folder / STATE_FILE).write_text(json.dumps(state))
    for f in folder.iterdir():
        if f.name == "meta.json":
            f.write_text("{ not json")
    with pytest.raises(IndexUnusable, match="damaged"):
        TextIndex.open(folder, "store-1")
    with pytest.raises(IndexUnusable):
        TextIndex.open(tmp_path / "nowhere", "store-1")


def test_filters_that_keep_every_document_are_left_out_and_come_back_when_needed(
        tmp_path: Path) -> None:
    """The index leaves out a corpus / expiry / staleness clause that would keep all of its
    documents (a MUST clause costs most of a search); each comes back once a document
    would be dropped by it: another corpus, a stale document, the clock passing an expiry."""
    idx = TextIndex.create(tmp_path / "t", "store-1")
    idx.apply([TextDoc(1, None, "otters swim", "a"), TextDoc(2, None, "otters dive", "a",
                                                             expires_at=NOW + 10)], (), seq=1)

    def found(corpora: list[str] | None = None, now: float = NOW) -> set[int]:
        return {r for r, _ in idx.search(parse("otters"), corpora=corpora, filters=Filters(),
                                         now=now, limit=10)}

    assert found(["a"]) == {1, 2}
    assert found(["a"], now=NOW + 10) == {1}  # expired at that clock, then back before it
    assert found(["a"]) == {1, 2}
    idx.apply([TextDoc(3, None, "otters nap", "b"), TextDoc(4, None, "otters hide", "a", stale=True)],
              (), seq=2)
    assert found(["a"]) == {1, 2}
    assert found(["a", "b"]) == {1, 2, 3}
    assert found(None, now=NOW + 20) == {1, 3}
