"""The query syntax (querysyntax.py): the pure parser, and what each form does on both stores.

`"phrase"`, `+word`, `-word`, `prefix*`, `title:`, `kind:`, `corpus:`, `path:`,
`language:`; a malformed query is plain words with a note. Exclusion and requirement hold
in every mode, vector hits included.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import PgDatabases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_congruence import assert_same, open_pair

from hybridkb import KnowledgeBase, querysyntax, textquery
from hybridkb.model import Filters
from hybridkb.querysyntax import TextMatch, Words

MODES = ("fts", "vector", "hybrid")

# -- the parser (pure) ----------------------------------------------------------------------


def test_plain_text_is_read_exactly_as_before() -> None:
    for text in ["find the migration_032 script", 'a "quoted phrase" b', "node.js C++ E2f-1",
                 "-2, -3 and +1 nucleosomes", "Beans: Anti-Nutrient?", "http://x.org/a", "std::vector",
                 "--verbose", "日本語のテキスト", ""]:
        parsed = querysyntax.parse(text)
        assert parsed.text == textquery.parse(text), text
        assert (parsed.match, parsed.kinds, parsed.corpora, parsed.paths, parsed.languages) == (
            None, None, None, None, None), text
        assert parsed.embed_text == text and parsed.notes == ()


def test_each_form() -> None:
    p = querysyntax.parse('+alpha -beta -"gamma delta" "eps zeta" comput* title:"get started" '
                          "kind:decision kind:lesson corpus:wiki path:src/**/*.py language:Python")
    assert p.text.terms == (("alpha",), ("eps", "zeta"), ("get", "started"))
    assert p.text.prefixes == ("comput",)
    assert p.match == TextMatch(required=(Words(("alpha",)),),
                                excluded=(Words(("beta",)), Words(("gamma", "delta"))),
                                title=(Words(("get", "started")),))
    assert (p.kinds, p.corpora, p.paths, p.languages) == (
        ("decision", "lesson"), ("wiki",), ("src/**/*.py",), ("python",))
    assert querysyntax.parse("x language:Python language:Python").languages == ("python",)
    assert p.embed_text == "alpha eps zeta comput get started"  # no excluded word, no filter
    assert querysyntax.parse("+comput* -tmp*").match == TextMatch(
        required=(Words(("comput",), prefix=True),), excluded=(Words(("tmp",), prefix=True),))


@pytest.mark.parametrize(("text", "why"), [
    ('say "hello', "quote is not closed"),
    ("cats - dogs", "a lone '-'"),
    ("cats +", "a lone '+'"),
    ("title: cats", "title: has no value"),
    ('kind:"  " cats', "kind: has no value"),
    ("lang:python cats", "unknown field 'lang'"),
    ("-kind:decision cats", "cannot be negated"),
    ("path:" + "x" * 501 + " cats", "path:"),
])
def test_malformed_queries_are_plain_words_with_a_note(text: str, why: str) -> None:
    parsed = querysyntax.parse(text)
    assert parsed.text == textquery.parse(text)
    assert parsed.match is None and parsed.kinds is None and parsed.paths is None
    assert len(parsed.notes) == 1 and why in parsed.notes[0] and "plain words" in parsed.notes[0]


def test_too_common_words_are_not_conditions() -> None:
    p = querysyntax.parse("+the cats a*")
    assert p.match is None and p.text.prefixes == ()
    assert any("too common" in n for n in p.notes) and any("prefix" in n for n in p.notes)


def test_fields_narrow_and_never_widen_the_callers_filters() -> None:
    p = querysyntax.parse("x kind:decision kind:memo corpus:a path:docs/ language:Go")
    filters, corpora, notes = p.narrow(Filters(kinds=("memo", "other")), ["a", "b"])
    assert (filters.kinds, filters.languages, filters.paths, corpora, notes) == (
        ("memo",), ("go",), ("docs/",), ["a"], [])
    _, corpora, notes = p.narrow(Filters(kinds=("other",)), ["a"])
    assert corpora == [] and "outside" in notes[0]
    _, corpora, notes = p.narrow(Filters(), ["b"])
    assert corpora == [] and "not among the corpora" in notes[0]
    filters, _, notes = p.narrow(Filters(paths=("src/",)), ["a"])
    assert filters.paths == ("src/",) and "ignored" in notes[0]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*'ab -+"*:_/()\t\n\x00é日', "title:", "kind:", "path:", "corpus:"]))
       .map("".join) | st.text())
def test_never_raises(text: str) -> None:
    parsed = querysyntax.parse(text)
    assert isinstance(parsed.text, textquery.TextQuery)
    parsed.narrow(Filters(), ["a"])


# -- on both stores ---------------------------------------------------------------------------

DOCS: list[dict[str, Any]] = [
    {"id": "adjacent", "text": "the quick brown fox jumps", "title": "Fox guide", "kind": "decision",
     "metadata": {"path": "src/fox.py", "language": "python"}},
    {"id": "apart", "text": "brown quick fox sleeps", "title": "Lazy notes", "kind": "lesson",
     "metadata": {"path": "docs/fox.md", "language": "markdown"}},
    {"id": "computing", "text": "computers compute computations", "title": "Machines", "kind": "decision"},
    {"id": "dog", "text": "a fox and a dog", "title": "Dog and fox", "kind": "memory"},
    {"id": "other", "text": "zebra quokka habitat", "corpus": "zoo", "kind": "memory"},
]


@pytest.fixture(params=["delta", "indexed"])
def store(kb: KnowledgeBase, request: pytest.FixtureRequest) -> KnowledgeBase:
    """The documents written after the text index was built and held back from it (SQLite:
    its delta answers for them), or folded into the indexes (`optimize`)."""
    kb.add("an unrelated seed note", id="seed")
    kb.search("seed")
    text = getattr(kb.backend, "_text", None)
    if request.param == "delta" and text is not None:
        text._start_worker = lambda: None  # no background commit
    kb.add_many(DOCS)
    if request.param == "indexed":
        kb.optimize()
    elif text is not None:
        assert len(text.view()[1]) == len(DOCS)
    return kb


def ids(kb: KnowledgeBase, query: str, mode: str, **options: Any) -> set[str]:
    return set(kb.search(query, mode=mode, **options).ids)


def test_a_phrase_matches_adjacent_words_only(store: KnowledgeBase) -> None:
    assert ids(store, '"quick brown"', "fts") == {"adjacent"}
    assert ids(store, '"brown quick"', "fts") == {"apart"}
    assert ids(store, '+"quick brown" fox', "hybrid") == {"adjacent"}


@pytest.mark.parametrize("mode", MODES)
def test_excluded_words_never_appear(store: KnowledgeBase, mode: str) -> None:
    found = ids(store, "fox -dog", mode)
    assert "dog" not in found and {"adjacent", "apart"} <= found
    assert "adjacent" not in ids(store, 'fox -"quick brown"', mode)
    assert not ids(store, "fox -fox", mode) & {"adjacent", "apart", "dog"}
    assert "computing" not in ids(store, "computers -comput*", mode)


@pytest.mark.parametrize("mode", MODES)
def test_required_words_and_title(store: KnowledgeBase, mode: str) -> None:
    assert ids(store, "+dog fox", mode) == {"dog"}
    assert ids(store, "fox title:guide", mode) == {"adjacent"}
    assert ids(store, 'fox title:"dog and fox"', mode) == {"dog"}  # stopwords keep their place
    assert ids(store, "fox title:fox*", mode) == {"adjacent", "dog"}


@pytest.mark.parametrize("mode", MODES)
def test_field_filters(store: KnowledgeBase, mode: str) -> None:
    """Each hit passes the field's filter; full text finds exactly the matching ones (a
    vector search lists every item the filter keeps, nearest first)."""
    for query, kept, matching in [
        ("fox kind:lesson", {"apart"}, {"apart"}),
        ("fox kind:lesson kind:memory", {"apart", "dog", "other"}, {"apart", "dog"}),
        ("fox path:docs/", {"apart"}, {"apart"}),
        ("fox path:**/*.py", {"adjacent"}, {"adjacent"}),
        ("fox language:Python", {"adjacent"}, {"adjacent"}),
        ("habitat corpus:zoo", {"other"}, {"other"}),
    ]:
        found = ids(store, query, mode)
        assert found <= kept and found >= matching, (query, found)
    result = store.search("fox corpus:nope", mode=mode)
    assert result.hits == [] and "not among" in result.notes[0]
    assert ids(store, "fox kind:decision", mode, filters={"kind": "lesson"}) == set()


def test_a_prefix_scores_the_words_it_starts(store: KnowledgeBase) -> None:
    result = store.search("comput*", mode="fts")
    assert result.ids == ["computing"] and result.hits[0].retrievers["fts"].score > 0
    assert ids(store, "quok*", "fts") == {"other"}
    assert ids(store, "+quok* habitat", "hybrid") == {"other"}


def test_a_malformed_query_searches_plain_words_with_a_note(store: KnowledgeBase) -> None:
    result = store.search('fox "quick', mode="fts")
    assert {"adjacent", "apart", "dog"} <= set(result.ids)
    assert any("quote is not closed" in n for n in result.notes)


def test_plain_queries_score_as_before(store: KnowledgeBase) -> None:
    """The syntax switched off reads the same text the same way: same hits, same scores."""
    for query in ["quick brown fox", 'the "quick brown" fox', "dog -3 +1", "fox: sleeps"]:
        for mode in MODES:
            a = store.search(query, mode=mode)
            b = store.search(query, mode=mode, syntax=False)
            assert [(h.id, h.score) for h in a.hits] == [(h.id, h.score) for h in b.hits], query


def test_syntax_off_reads_operators_as_words(store: KnowledgeBase) -> None:
    assert "dog" in ids(store, "fox -dog", "fts", syntax=False)


# -- the two stores answer alike --------------------------------------------------------------

WORDS = ["bakodu", "gomati", "kupaba", "nodagi", "pudamo", "vatoku", "zanubi", "ludopa", "mikoga",
         "fodaku", "bamuto", "kotabu"]


def _docs(titles: bool) -> list[dict[str, Any]]:
    """Made-up words no stemmer changes and no stopword list holds, each once per text."""
    rng = random.Random(3)
    out = []
    for k in range(120):
        doc: dict[str, Any] = {
            "id": f"d{k:03d}", "text": " ".join(rng.sample(WORDS, rng.randint(3, 8))),
            "kind": ("decision", "lesson", "memory")[k % 3],
            "metadata": {"path": f"src/m{k % 3}/f{k}.{'py' if k % 2 else 'md'}",
                         "language": "python" if k % 2 else "markdown"}}
        if titles:
            doc["title"] = " ".join(rng.sample(WORDS, 2))
        out.append(doc)
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory,
         pg_server: PgDatabases) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    """SQLite and PostgreSQL holding the same untitled items in one corpus: the same BM25
    statistics and lengths, so the same scores."""
    yield from open_pair(tmp_path_factory.mktemp("syntax"), pg_server, "kb", _docs(titles=False),
                         optimize=True)


@pytest.fixture(scope="module")
def titled(tmp_path_factory: pytest.TempPathFactory,
           pg_server: PgDatabases) -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    """The same with titles (each backend weighs a title its own way: scores differ)."""
    yield from open_pair(tmp_path_factory.mktemp("titled"), pg_server, "kb", _docs(titles=True),
                         optimize=True)


SYNTAX_QUERIES = [
    "bakodu -gomati", "+kupaba nodagi", '"pudamo vatoku"', '+"zanubi ludopa" mikoga',
    "bak* fodaku", "+bam* -kot*", "nodagi kind:lesson", "pudamo path:src/m1/",
    "vatoku language:python corpus:main", "vatoku corpus:side",
    'zanubi -ludopa -mikoga -"fodaku bamuto"', "ko* ba*", 'mikoga "fodaku', "lone - kotabu",
]
TITLE_QUERIES = ["title:bakodu gomati", 'title:"gomati kupaba" nodagi', "+title:ko* -zanubi pudamo"]


@pytest.mark.parametrize("mode", MODES)
def test_both_stores_answer_syntax_alike(pair: tuple[KnowledgeBase, KnowledgeBase], mode: str) -> None:
    answered = 0
    for query in SYNTAX_QUERIES:
        a, b = (kb.search(query, mode=mode, limit=10) for kb in pair)
        assert a.notes == b.notes, query
        assert_same(a, b, f"{mode} {query!r}")
        answered += bool(a.hits)
    assert answered >= len(SYNTAX_QUERIES) - 2


def test_both_stores_match_the_same_titles(titled: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    for query in TITLE_QUERIES:
        a, b = (kb.search(query, mode="fts", limit=200) for kb in titled)
        assert set(a.ids) == set(b.ids) and a.ids, query
        a, b = (kb.search(query, mode="vector", limit=10) for kb in titled)
        assert_same(a, b, f"vector {query!r}")
