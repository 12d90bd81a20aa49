import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb import textquery
from hybridkb.storage.sqlite import driver as sqlite_driver

HOSTILE = ['"', "AND", "*", "-foo", "foo-bar", "a:b", "NEAR(", "C++", "node.js", "", "   ",
           'say "hello', "OR OR", "NOT x", "^start", "col:term", "(a OR b", "\x00\x01",
           "emoji 🎉 test", "日本語のテキスト", "'; DROP TABLE items; --"]


@pytest.fixture(scope="module")
def fts_conn():  # type: ignore[no-untyped-def]
    conn = sqlite_driver.connect(":memory:", timeout=1)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(title, text, "
                 "tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("INSERT INTO t VALUES ('Migrations', 'run migration_032 then kubectl apply')")
    conn.execute("INSERT INTO t VALUES ('JS', 'node.js and C++ and a:b pairs')")
    yield conn
    conn.close()


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_queries_are_valid_fts5(fts_conn, text: str) -> None:  # type: ignore[no-untyped-def]
    expr = textquery.parse(text).fts5()
    if expr is not None:
        fts_conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


def test_empty_after_cleaning_is_no_query() -> None:
    for text in ["", "   ", "***", '"', "-", "()", "\x00"]:
        assert textquery.parse(text).is_empty
        assert textquery.parse(text).fts5() is None


def test_identifier_stays_one_phrase(fts_conn) -> None:  # type: ignore[no-untyped-def]
    q = textquery.parse("migration_032")
    assert q.terms == (("migration", "032"),)
    rows = fts_conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (q.fts5(),)).fetchall()
    assert rows == [(1,)]


def test_terms_are_or_ed_and_deduplicated() -> None:
    q = textquery.parse("Kubectl apply kubectl APPLY")
    assert q.fts5() == '"kubectl" OR "apply"'


def test_explicit_phrase_is_kept() -> None:
    q = textquery.parse('find "exact phrase here" now')
    assert ("exact", "phrase", "here") in q.terms
    assert ("find",) in q.terms


def test_operators_lose_their_power() -> None:
    assert textquery.parse("cats NEAR dogs").fts5() == '"cats" OR "near" OR "dogs"'
    assert textquery.parse("cats AND dogs").fts5() == '"cats" OR "dogs"'


def test_stopwords_dropped_unless_nothing_else() -> None:
    assert textquery.parse("where is the data").fts5() == '"data"'
    assert textquery.parse("When did Caroline go to the support group?").words == [
        "caroline", "go", "support", "group"]
    assert textquery.parse("to be or not to be").fts5() == '"to" OR "be" OR "or" OR "not"'
    assert textquery.parse('"the who"').terms == (("the", "who"),)
    assert textquery.parse('the "who" band').terms == (("band",),)  # all-stopword terms go


def test_long_query_is_capped_to_selective_terms() -> None:
    words = [f"word{i}" for i in range(500)] + ["the", "and", "of"] * 50
    q = textquery.parse(" ".join(words), max_terms=64)
    assert len(q.terms) == 64
    assert q.truncated
    assert all(t[0] not in textquery.STOPWORDS for t in q.terms)


def test_non_string_is_empty() -> None:
    assert textquery.parse(None).is_empty
    assert textquery.parse(123).is_empty


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_valid_fts5(fts_conn, text: str) -> None:  # type: ignore[no-untyped-def]
    expr = textquery.parse(text).fts5()
    if expr is not None:
        fts_conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([*HOSTILE, "word", "x", '"quoted phrase"']), max_size=30))
def test_hostile_combinations(fts_conn, parts: list[str]) -> None:  # type: ignore[no-untyped-def]
    expr = textquery.parse(" ".join(parts)).fts5()
    if expr is not None:
        fts_conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


# Characters at and around every edge of the CJK class, past the BMP, surrogates, ASCII.
_CJK_EDGES = [chr(c) for c in (
    0x10FF, 0x1100, 0x11FF, 0x1200, 0x303F, 0x3040, 0x30FF, 0x3100, 0x312F, 0x3130, 0x318F,
    0x3190, 0x31EF, 0x31F0, 0x31FF, 0x3200, 0x33FF, 0x3400, 0x4DBF, 0x4DC0, 0x4DFF, 0x4E00,
    0x9FFF, 0xA000, 0xA95F, 0xA960, 0xA97F, 0xA980, 0xABFF, 0xAC00, 0xD7AF, 0xD7B0, 0xD7FF,
    0xD800, 0xDFFF, 0xE000, 0xF8FF, 0xF900, 0xFAFF, 0xFB00, 0xFF65, 0xFF66, 0xFF9F, 0xFFA0,
    0xFFFF, 0x10000, 0x1F389, 0x1FFFF, 0x20000, 0x3134F, 0x31350, 0x10FFFF)] + list("aé–μ ")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_CJK_EDGES) | st.characters(), max_size=12).map("".join))
def test_has_cjk_is_whether_the_class_finds_a_character(text: str) -> None:
    """The cheap check every document goes through says what the CJK class itself says."""
    assert textquery.has_cjk(text) == (textquery._CJK_RUN.search(text) is not None)
    if not textquery.has_cjk(text):
        assert textquery.cjk_expand(text) == text
