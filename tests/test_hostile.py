"""Hostile and malformed input on every backend: a search returns (possibly no) hits or raises
one of the library's documented errors (HybridKBError subclasses), never anything else;
injection attempts through every string that reaches SQL change nothing and read nothing
else; a refused item writes nothing and its error names it.

Property tests run a bounded number of examples; `--slow` runs more.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import hybridkb
from hybridkb import (
    DimensionMismatchError,
    HybridKBError,
    InvalidFilterError,
    InvalidInputError,
    Item,
    KnowledgeBase,
    NotFoundError,
    SearchResult,
)
from hybridkb.cli import cli

SEED_ITEMS = [
    {"id": "a1", "text": "Run migration_032 before deploying the billing service", "corpus": "ops",
     "kind": "decision", "metadata": {"team": "core", "prio": 1}},
    {"id": "a2", "text": "We keep all data in a single SQLite file on local disk", "corpus": "ops",
     "kind": "lesson", "scope": "team", "metadata": {"team": "ops"}},
    {"id": "b1", "text": "C++ templates and node.js modules; a:b pairs; NEAR(x y)", "corpus": "code",
     "kind": "code", "title": "src/x.cc", "metadata": {"lang": "c++"}},
    {"id": "b2", "text": "日本語のテキストと絵文字 🎉 in one note", "corpus": "code", "repo": "r1"},
    {"id": "secret", "text": "the secret launch code is swordfish", "corpus": "private",
     "namespace": "hidden", "metadata": {"acl": "admin"}},
]
SEED_IDS = {it["id"] for it in SEED_ITEMS}

FRAGMENTS = ['"', "'", "AND", "OR", "NOT", "*", "-x", "a:b", "NEAR(", "NEAR(a b, 2)", "C++", "(", ")",
             "^", "{", "}", "title:", "text:", "col:term", "🎉", "日本語", "\x00", "\x01", "\x7f", "\u202e",
             "\ud800", "%", "_", "\\", ";", "--", "/*", "*/", "'; DROP TABLE items; --",
             "\" OR 1=1 --", "migration_032", "swordfish", "SELECT", "\n", "\t", " ", "",
             "x" * 300, "ǅ", "ﬁ", "İ"]

any_char = st.characters(codec=None, exclude_categories=())
hostile_text = st.one_of(
    st.text(any_char, max_size=60),
    st.lists(st.sampled_from(FRAGMENTS), max_size=12).map(" ".join),
    st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join),
    st.sampled_from(["", " ", "x" * 100_000, "🎉" * 30_000, "日本" * 50_000, "a " * 50_000,
                     '"' * 10_000, "NEAR(" * 5_000]),
)
scalar = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                   st.floats(allow_nan=True, allow_infinity=True), hostile_text)
json_like = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)), max_leaves=8)
FILTER_KEYS = ["kind", "kinds", "scope", "repo", "namespace", "metadata", "created_after",
               "created_before", "updated_after", "updated_before", "include_expired", "include_stale"]
filter_value = st.one_of(json_like, st.datetimes(), st.just(datetime(1, 1, 1, tzinfo=UTC)),
                         st.sampled_from(["2024-01-01", "2024-13-45", "yesterday", "9999-12-31T23:59:59"]))
metadata_filter = st.dictionaries(
    st.one_of(st.sampled_from(["team", "acl", "prio", "lang"]), hostile_text, st.integers()),
    st.one_of(json_like, st.lists(scalar, max_size=3), st.sampled_from(["core", "admin", 1, True])),
    max_size=3)
filters = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(FILTER_KEYS), filter_value, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(FILTER_KEYS), hostile_text), filter_value, max_size=3),
    st.fixed_dictionaries({"metadata": metadata_filter}),
    st.fixed_dictionaries({}, optional={"kind": st.one_of(scalar, st.lists(scalar, max_size=3)),
                                        "scope": st.one_of(scalar, st.lists(scalar, max_size=3)),
                                        "metadata": metadata_filter}),
    json_like,
)
corpora = st.one_of(st.none(), hostile_text, st.sampled_from(["ops", "code", "private", "nope"]),
                    st.lists(st.one_of(hostile_text, st.sampled_from(["ops", "code"]), st.integers()),
                             max_size=3))


def examples(request: pytest.FixtureRequest, default: int) -> int:
    return default * 10 if request.config.getoption("--slow") else default


def run_property(request: pytest.FixtureRequest, default: int, strategy: Any,
                 check: Callable[[Any], None]) -> None:
    """Run `check` over `strategy` with a bounded, reproducible number of examples."""

    @settings(max_examples=examples(request, default), deadline=None, derandomize=True,
              database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def prop(value: Any) -> None:
        check(value)

    prop()


@pytest.fixture
def filled(kb: KnowledgeBase) -> KnowledgeBase:
    kb.add_many(SEED_ITEMS)
    return kb


def snapshot(kb: KnowledgeBase) -> list[dict[str, Any]]:
    return sorted((it.to_dict() for it in kb.iter_items()), key=lambda d: str(d["id"]))


def search_or_documented_error(kb: KnowledgeBase, query: Any, **options: Any) -> SearchResult | None:
    try:
        result = kb.search(query, **options)
    except HybridKBError:
        return None
    assert isinstance(result, SearchResult)
    assert set(result.ids) <= SEED_IDS and len(set(result.ids)) == len(result.ids)
    assert result.answered_by in ("hybrid", "fts", "vector", "substring", "none")
    assert result.query == (query if isinstance(query, str) else "")
    if result.answered_by == "none":
        assert result.hits == []
    return result


# -- query strings --------------------------------------------------------------------------


def test_any_query_string_searches_cleanly_in_every_mode(
        filled: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    before = snapshot(filled)

    def check(query: str) -> None:
        for mode in ("hybrid", "fts", "vector"):
            result = filled.search(query, mode=mode, corpora=["ops", "code"])  # a query never raises
            assert set(result.ids) <= {"a1", "a2", "b1", "b2"}
            assert result.answered_by in ("hybrid", "fts", "vector", "substring", "none")

    run_property(request, 60, hostile_text, check)
    assert snapshot(filled) == before


def test_exact_identifiers_and_operators_still_match(filled: KnowledgeBase) -> None:
    assert filled.search("migration_032", mode="fts").ids == ["a1"]
    assert filled.search("C++", mode="fts", corpora="code").ids == ["b1"]
    assert filled.search("a:b", mode="fts").ids == ["b1"]
    assert filled.search("NEAR(", mode="fts").ids == ["b1"]
    assert filled.search("-deploying", mode="fts").ids == []  # "-" excludes (querysyntax.py)
    assert filled.search("-deploying", mode="fts", syntax=False).ids == ["a1"]  # or is a word
    assert filled.search("日本語のテキストと絵文字", mode="fts").ids == ["b2"]


# -- options, filters, corpora, ids -----------------------------------------------------------


def test_any_filters_give_hits_or_documented_errors(
        filled: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    before = snapshot(filled)

    def check(args: tuple[Any, str]) -> None:
        flt, mode = args
        search_or_documented_error(filled, "billing data code", filters=flt, mode=mode)

    run_property(request, 150, st.tuples(filters, st.sampled_from(["hybrid", "fts", "vector"])), check)
    assert snapshot(filled) == before


def test_any_corpora_give_hits_or_documented_errors(
        filled: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    def check(args: tuple[Any, str]) -> None:
        names, mode = args
        search_or_documented_error(filled, "billing data code", corpora=names, mode=mode)

    run_property(request, 80, st.tuples(corpora, st.sampled_from(["hybrid", "fts", "vector"])), check)


numbers = st.one_of(st.integers(min_value=-(2**64), max_value=2**64),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans())
search_options = st.fixed_dictionaries({}, optional={
    "mode": st.one_of(st.sampled_from(["hybrid", "fts", "vector"]), hostile_text),
    "fusion": st.one_of(st.sampled_from(["rrf", "convex", "dbsf"]), hostile_text),
    "limit": st.integers(min_value=-5, max_value=20_000), "offset": st.integers(min_value=-5, max_value=10**6),
    "rrf_k": numbers, "weights": st.lists(st.floats(allow_nan=True), max_size=3),
    "depth": st.one_of(st.none(), st.integers(min_value=-5, max_value=10**5)),
    "dedup_threshold": st.one_of(st.none(), st.floats(allow_nan=True)),
    "min_score": st.one_of(st.none(), st.floats(allow_nan=True)),
})


def test_any_numeric_options_give_hits_or_documented_errors(
        filled: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    def check(options: dict[str, Any]) -> None:
        search_or_documented_error(filled, "billing migration", **options)

    run_property(request, 120, search_options, check)


ids = st.one_of(hostile_text, st.sampled_from(["a1", "secret", "' OR '1'='1", "a1' --", "%", "_"]))


def test_any_id_gets_deletes_cleanly(filled: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    before = snapshot(filled)

    def check(item_id: str) -> None:
        assume(item_id not in SEED_IDS)
        with pytest.raises(NotFoundError):
            filled.get(item_id)
        assert filled.get_many([item_id, "a1"]) == [filled.get("a1")]
        assert filled.delete(item_id) is False
        assert filled.delete_many([item_id, item_id]) == 0

    run_property(request, 80, ids, check)
    assert snapshot(filled) == before


# -- items: every field hostile ---------------------------------------------------------------

text_field = st.one_of(st.none(), hostile_text)
plain_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
              st.floats(min_value=-1e15, max_value=1e15, allow_nan=False), hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)),
    max_leaves=8)
timestamps = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                       st.integers(min_value=-(2**70), max_value=2**70), st.datetimes(),
                       st.sampled_from(["2024-05-01T10:00:00+02:00", "not a date", ""]))
item_dicts = st.fixed_dictionaries(
    {"text": st.one_of(hostile_text, st.integers(), st.none())},
    optional={
        "id": st.one_of(hostile_text, st.integers()), "corpus": hostile_text, "title": text_field,
        "kind": text_field, "scope": text_field, "repo": text_field, "namespace": text_field,
        "source_url": text_field,
        "metadata": st.one_of(st.dictionaries(st.one_of(hostile_text, st.integers()), plain_json, max_size=4),
                              json_like),
        "created_at": timestamps, "updated_at": timestamps, "expires_at": timestamps,
        "last_accessed_at": timestamps,
        "access_count": st.one_of(st.integers(min_value=-3, max_value=2**70), st.floats(), hostile_text),
        "stale": st.one_of(st.booleans(), st.integers(-1, 2), hostile_text, st.none()),
        "ttl": st.one_of(st.none(), numbers),
    })


def test_any_item_is_stored_exactly_or_refused_without_a_trace(
        kb: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    kb.add("anchor item that stays", id="anchor")
    counter = iter(range(10**9))

    def check(raw: dict[str, Any]) -> None:
        raw = dict(raw)
        raw.setdefault("id", f"gen{next(counter)}")
        before = kb.count()
        try:
            [item_id] = kb.add_many([raw], replace=True)
        except HybridKBError as exc:
            assert kb.count() == before
            assert str(exc)
            return
        stored = kb.get(item_id, include_expired=True)
        assert stored.text == raw["text"] and stored.id == raw["id"]
        for name in ("corpus", "title", "kind", "scope", "repo", "namespace", "source_url"):
            if name in raw:
                assert getattr(stored, name) == raw[name], name
        if raw.get("metadata") is not None:
            assert stored.metadata == json.loads(json.dumps(raw["metadata"]))
        if "access_count" in raw:
            assert stored.access_count == raw["access_count"]
        kb.delete(item_id)

    run_property(request, 150, item_dicts, check)
    assert [it.id for it in kb.iter_items()] == ["anchor"]
    assert kb.search("anchor", mode="fts").ids == ["anchor"]
    assert _integrity(kb) == []


def _integrity(kb: KnowledgeBase) -> list[str]:
    return list(kb.backend.integrity_problems())


# -- injection --------------------------------------------------------------------------------

INJECTIONS = [
    "' OR '1'='1", "' OR 1=1 --", "\" OR \"\"=\"", "x'); DROP TABLE items; --", "x\"; DROP TABLE items; --",
    "1; DELETE FROM items", "ops' OR corpus='private", "a') OR 1=1 --", "$.team", "$[0]", "*",
    "%", "_", "\\", "items_fts MATCH 'swordfish'", "') UNION SELECT id, text FROM items --",
    "team' OR m.key IS NOT NULL OR 'a'='a", "' || (SELECT text FROM items WHERE id='secret') || '",
    "E'\\\\x27 OR 1=1", "$$ OR 1=1 $$", "1::text; DROP TABLE items; --",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_through_every_string_changes_and_reveals_nothing(
        filled: KnowledgeBase, payload: str) -> None:
    before = snapshot(filled)
    kb = filled
    # corpus names
    with pytest.raises(NotFoundError):
        kb.search("swordfish", corpora=[payload])
    for mode in ("hybrid", "fts", "vector"):
        assert set(kb.search("swordfish", corpora=[payload, "ops"], mode=mode).ids) <= {"a1", "a2"}
    # filter values and metadata keys/values reach SQL as bound values only
    for flt in ({"scope": [payload, "nope"]}, {"repo": payload},
                {"namespace": payload}, {"metadata": {payload: "admin"}},
                {"metadata": {"acl": payload}}, {"metadata": {payload: payload}}):
        for mode in ("hybrid", "fts", "vector"):
            assert kb.search("swordfish launch code", filters=flt, mode=mode).ids == [], (flt, mode)
    for mode in ("hybrid", "fts", "vector"):  # a kind no item has: refused by name, never run
        with pytest.raises(InvalidFilterError, match="unknown kind"):
            kb.search("swordfish launch code", filters={"kind": payload}, mode=mode)
    # unknown filter keys are refused, not interpolated
    with pytest.raises(InvalidFilterError):
        kb.search("swordfish", filters={payload: "x"})
    # ids
    with pytest.raises(NotFoundError):
        kb.get(payload)
    assert kb.get_many([payload]) == []
    assert kb.delete(payload) is False
    # option strings
    for options in ({"mode": payload}, {"fusion": payload}):
        with pytest.raises(InvalidInputError):
            kb.search("swordfish", **options)
    assert snapshot(kb) == before
    # and written as data, every string comes back literally, harming nothing
    kb.add(payload, id=payload, corpus=payload if payload.strip() else "x", title=payload, kind=payload,
           scope=payload, repo=payload, namespace=payload, source_url=payload, metadata={payload: payload})
    stored = kb.get(payload)
    assert (stored.text, stored.title, stored.kind, stored.metadata) == (payload, payload, payload,
                                                                        {payload: payload})
    assert kb.search("swordfish", filters={"metadata": {payload: payload}}).ids == [payload]
    assert kb.search("swordfish", filters={"metadata": {payload: "admin"}}).ids == []
    assert kb.delete(payload) is True
    assert snapshot(kb) == before
    assert _integrity(kb) == []


def test_label_template_cannot_break_search(filled: KnowledgeBase) -> None:
    for template in ("[{title[x]}]", "{0}", "{id.__class__}", "{missing}", "{", "{title!z}"):
        try:
            filled.set_label_template("code", template)
        except InvalidInputError:
            continue
        assert filled.search("templates", corpora="code").ids


# -- malformed items, vectors and files --------------------------------------------------------


@pytest.mark.parametrize(("bad", "error"), [
    ({"vector": [0.1] * 10}, DimensionMismatchError),
    ({"vector": [0.1] * 65}, DimensionMismatchError),
    ({"vector": [float("nan")] * 64}, InvalidInputError),
    ({"vector": [1.0] * 63 + [float("-inf")]}, InvalidInputError),
    ({"vector": [[0.1] * 32, [0.1] * 32]}, InvalidInputError),
    ({"vector": "not a vector"}, InvalidInputError),
    ({"vector": [1.0] * 63 + [None]}, InvalidInputError),
    ({"text": ""}, InvalidInputError),
    ({"text": " \n\t "}, InvalidInputError),
    ({"text": "x" * 1_000_001}, InvalidInputError),
    ({"text": "lone \udcff surrogate"}, InvalidInputError),
    ({"title": "lone \ud800 surrogate"}, InvalidInputError),
    ({"metadata": {"k": "lone \ud800"}}, InvalidInputError),
    ({"metadata": {"k": float("nan")}}, InvalidInputError),
    ({"metadata": {1: "a", "b": 2}}, InvalidInputError),
    ({"stale": "yes"}, InvalidInputError),
    ({"access_count": -1}, InvalidInputError),
    ({"created_at": 10**400}, InvalidInputError),
    ({"created_at": float("inf")}, InvalidInputError),
])
def test_bad_item_in_a_batch_is_named_and_nothing_is_written(
        kb: KnowledgeBase, bad: dict[str, Any], error: type[Exception]) -> None:
    kb.add("already here", id="old")
    batch = [{"text": "good one", "id": "g1"}, {"text": "bad one", "id": "culprit", **bad},
             {"text": "good two", "id": "g2"}]
    with pytest.raises(error, match="culprit"):
        kb.add_many(batch)
    assert [it.id for it in kb.iter_items()] == ["old"]
    assert _integrity(kb) == []


@pytest.mark.parametrize("record", [Item(text="x", id="culprit", metadata=[1]),  # type: ignore[arg-type]
                                    Item(text="x", id="culprit", stale=None),  # type: ignore[arg-type]
                                    Item(text=b"bytes", id="culprit"),  # type: ignore[arg-type]
                                    Item(text="x", id="culprit", created_at=float("nan"))])
def test_bad_item_records_are_refused_too(kb: KnowledgeBase, record: Item) -> None:
    with pytest.raises(InvalidInputError, match="culprit"):
        kb.add_many([Item(text="good", id="g"), record])
    assert kb.count() == 0


def test_text_of_exactly_the_limit_is_accepted(kb: KnowledgeBase) -> None:
    big = ("word " * 200_000)[:1_000_000]
    kb.add(big + "x" * (1_000_000 - len(big)), id="big")
    assert kb.search("word", mode="fts").ids == ["big"]


def test_add_many_commits_earlier_batches_then_stops_at_the_bad_one(kb: KnowledgeBase) -> None:
    items = [{"text": f"item {i}", "id": f"i{i}"} for i in range(10)]
    items[7]["vector"] = [float("nan")] * 64
    with pytest.raises(InvalidInputError, match="'i7'"):
        kb.add_many(items, batch_size=5)
    assert sorted(it.id or "" for it in kb.iter_items()) == [f"i{i}" for i in range(5)]


def test_caller_vectors_of_an_fts_only_store_set_its_dimension(fts_kb: KnowledgeBase) -> None:
    vec = np.ones(8, dtype=np.float32)
    fts_kb.add("with a vector", id="v", vector=vec)
    with pytest.raises(DimensionMismatchError, match="'w'"):
        fts_kb.add("wrong size", id="w", vector=np.ones(9))
    assert fts_kb.count() == 1


def _cli(db: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", db, "--embedder", "hashing-64", "--json", *args])


def test_import_is_all_or_nothing_across_batches_unless_skip_bad(tmp_path: Path) -> None:
    db = str(tmp_path / "imp.db")
    path = tmp_path / "items.jsonl"
    lines = [json.dumps({"id": f"d{i}", "text": f"document number {i}"}).encode() for i in range(40)]
    lines[25] = b'{"id": "bad-utf8", "text": "caf\xe9"}'
    lines[31] = json.dumps({"id": "badvec", "text": "x", "vector": [1.0, 2.0]}).encode()
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = _cli(db, "import", str(path), "--batch-size", "10")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert ":26:" in result.output  # the line is named
    assert json.loads(_cli(db, "stats").stdout)["items"] == 0
    result = _cli(db, "import", str(path), "--batch-size", "10", "--skip-bad")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # the text is committed first, then embedded in the same run
    assert (out["imported"], out["skipped"], out["embedded"], out["awaiting_embedding"]) == (38, 2, 38, 0)
    assert "badvec" in result.stderr and ":26:" in result.stderr


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x00garbage", b"\x1f\x8b\x08 not really gzip",
                                     b"[1, 2, 3]\n", b'{"text": "x", "metadata": [1]}\n', b"null\n",
                                     b'{"id": {"nested": 1}, "text": "x"}\n', b'{"text": "a\\u0000b"}\n',
                                     b'"just a string"\n', b"{" * 100_000 + b"\n", b"[" * 100_000 + b"\n",
                                     b'{"text": "x", "metadata": ' + b'{"a": ' * 50 + b'1' + b'}' * 51 + b"\n"])
def test_malformed_import_files_fail_cleanly(tmp_path: Path, content: bytes) -> None:
    db = str(tmp_path / "m.db")
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    result = _cli(db, "import", str(path))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and json.loads(result.stdout)["error"]  # --json: an object
    assert json.loads(_cli(db, "stats").stdout)["items"] == 0
    gz = tmp_path / "bad.jsonl.gz"
    gz.write_bytes(content)
    result = _cli(db, "import", str(gz))
    assert result.exit_code == 1 and "Traceback" not in result.output


def test_timestamps_outside_any_calendar_are_refused(kb: KnowledgeBase) -> None:
    for value in (10**400, -(10**400), float("nan"), "0000-01-01", "+10000-01-01"):
        with pytest.raises(InvalidInputError):
            kb.add("when?", created_at=value)
        with pytest.raises(InvalidInputError):
            kb.search("when", filters={"created_after": value})
    assert kb.count() == 0
    assert math.isfinite(hybridkb.model.to_ts(datetime(1, 1, 1, tzinfo=UTC)) or 0.0)
