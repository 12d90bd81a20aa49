"""The attacks of issue #13, each one a test that failed before the fix (see docs/reliability.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hybridkb
from hybridkb import (
    BackendUnavailableError,
    HashingEmbedder,
    InvalidInputError,
    KnowledgeBase,
    NotFoundError,
)
from hybridkb.cli import cli
from hybridkb.storage import codec
from hybridkb.validation import redact_target, scrub

# -- 2. an empty target is refused, never a temporary database --------------------------------


@pytest.mark.parametrize("target", ["", "   ", "\t"])
def test_an_empty_target_is_refused(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="store target is empty"):
        hybridkb.open(target, embedder=None)
    result = CliRunner().invoke(cli, ["--db", target, "--embedder", "hashing-8", "add", "important"])
    assert result.exit_code == 1
    assert "store target is empty" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


# -- 3. PostgreSQL passwords never shown; malformed URLs are clear errors ----------------------

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://u:{SECRET}@h:5/db?x=1", "postgresql://u:***@h:5/db?x=1"),
    (f"postgresql://u@h/db?password={SECRET}", "postgresql://u@h/db?password=***"),
    (f"postgres://h/db?sslmode=disable&Password={SECRET}#f", "postgres://h/db?sslmode=disable&Password=***#f"),
    (f"postgresql://h/db?pass%77ord={SECRET}", "postgresql://h/db?pass%77ord=***"),
    (f"postgresql://u:{SECRET}@[::1", "postgresql://u:***@[::1"),
    (f"postgresql://u:{SECRET}@h1:5,h2:6/db", "postgresql://u:***@h1:5,h2:6/db"),
    (f"host=h password={SECRET} dbname=x", "host=h password=*** dbname=x"),
    (f"host=h password='{SECRET} x' dbname=x", "host=h password=*** dbname=x"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("kb.db", "kb.db"),
])
def test_every_password_form_is_redacted(url: str, shown: str) -> None:
    assert redact_target(url) == shown
    assert SECRET not in scrub(f"error near {url!r}: {url}", url)
    if SECRET in url and "x'" not in url:
        assert scrub(f"password {SECRET} refused", url) == "password *** refused"


@pytest.mark.parametrize("url", [
    "postgresql://[::1", f"postgresql://u:{SECRET}@[::1", f"postgresql://u:{SECRET}@h:99999/db",
    f"postgresql://u@h/db?password={SECRET}&nosuchparam=1", f"postgresql://u:{SECRET}@h:port/db",
])
def test_a_malformed_url_is_a_clear_error_without_the_password(url: str) -> None:
    with pytest.raises((InvalidInputError, BackendUnavailableError)) as info:
        hybridkb.open(url, embedder=None, connect_timeout=1)
    assert SECRET not in str(info.value) and "Traceback" not in str(info.value)
    result = CliRunner().invoke(cli, ["--db", url, "--no-embedder", "init"])
    assert result.exit_code == 1 and result.output.startswith("error: ")
    assert SECRET not in result.output


def _with_password(pg_url: str, form: str) -> str:
    """The test server trusts every login, so any password is accepted (and must not leak)."""
    if form == "query":
        return f"{pg_url}?password={SECRET}"
    if form == "userinfo":
        scheme, rest = pg_url.split("://", 1)
        user, host = rest.split("@", 1)
        return f"{scheme}://{user}:{quote(SECRET)}@{host}"
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(pg_url), "password": SECRET})


@pytest.mark.parametrize("form", ["query", "userinfo", "conninfo"])
def test_a_real_store_never_shows_its_password(pg_url: str, form: str) -> None:
    url = _with_password(pg_url, form)
    with hybridkb.open(url, embedder=HashingEmbedder(8)) as kb:
        kb.add("hello", id="a")
        assert SECRET not in kb.target and "***" in kb.target
        assert SECRET not in json.dumps(kb.stats())
    for args in (["--json", "stats"], ["stats"], ["search", "hello"]):
        result = CliRunner().invoke(cli, ["--db", url, "--embedder", "hashing-8", *args])
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
    bad = url.replace("hkb_test", "hkb_missing") if form != "conninfo" else url + " port=1"
    with pytest.raises(BackendUnavailableError) as info:
        hybridkb.open(bad, embedder=None, connect_timeout=1)
    assert SECRET not in str(info.value)


# -- 6. wrongly typed options are InvalidInputErrors naming the option -------------------------


@pytest.mark.parametrize("spec", ["hashing-0", "hashing-99999999", "hashing--3", "hashing-x", "hashing-1e3"])
def test_a_bad_hashing_dimension_is_a_clear_error(spec: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="embedder"):
        hybridkb.open(tmp_path / "kb.db", embedder=spec)
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "kb.db"), "--embedder", spec, "add", "x"])
    assert result.exit_code == 1 and "embedder" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(("option", "value"), [
    ("rrf_k", "x"), ("weights", "ab"), ("weights", [1, "a"]), ("weights", 3), ("depth", "x"),
    ("depth", 2.5), ("min_score", "x"), ("limit", True), ("limit", 2.0), ("offset", False),
    ("dedup_threshold", "0.5"), ("dedup_cosine", [0.5]), ("touch", "yes"), ("mode", 1),
    ("fusion", 3), ("score_policy", "none"),
])
def test_a_wrongly_typed_search_option_is_named(kb: KnowledgeBase, option: str, value: object) -> None:
    kb.add("x marks the spot", id="a")
    with pytest.raises(InvalidInputError, match=option):
        kb.search("x", **{option: value})


WRONG = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(),
    st.text(max_size=8), st.binary(max_size=4), st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.just(object()), st.just(b"\x00"),
)
SEARCH_OPTIONS = ["mode", "limit", "offset", "corpora", "filters", "fusion", "weights", "rrf_k", "depth",
                  "dedup_threshold", "dedup_cosine", "score_policy", "min_score", "touch"]
ADD_OPTIONS = ["id", "corpus", "title", "kind", "scope", "repo", "namespace", "source_url", "metadata",
               "created_at", "updated_at", "expires_at", "last_accessed_at", "access_count", "stale",
               "ttl", "vector"]
MANY_OPTIONS = ["replace", "batch_size", "progress", "items"]


def _examples(request: pytest.FixtureRequest, default: int) -> int:
    return default * 10 if request.config.getoption("--slow") else default


def test_any_option_of_any_type_is_accepted_or_an_invalid_input_error(
        kb: KnowledgeBase, request: pytest.FixtureRequest) -> None:
    kb.add("x marks the spot", id="seed", corpus="c")

    @settings(max_examples=_examples(request, 150), deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(SEARCH_OPTIONS + ADD_OPTIONS + MANY_OPTIONS), WRONG)
    def prop(option: str, value: Any) -> None:
        try:
            if option in SEARCH_OPTIONS:
                kb.search("x spot", **{option: value})
            elif option in ADD_OPTIONS:
                kb.add("another spot", **{option: value})
            elif option == "items":
                kb.add_many(value)
            else:
                kb.add_many([{"text": "many spot"}], **{option: value})
        except InvalidInputError:
            pass
        except NotFoundError:  # a corpus name of the right type that no item has
            assert option == "corpora"
            assert isinstance(value, str) or all(isinstance(v, str) for v in value)

    prop()


# -- 8. label templates: plain field names only, never rendered otherwise ----------------------

BAD_TEMPLATES = ["{title.__class__.__mro__}", "{title[0]}", "{id.__class__}", "{metadata[x]}", "{0}", "{}",
                 "{title!r}", "{title:{width}}", "{title:>1000}", "{title:.9999}", "{title:,}", "{title:%}",
                 "{title", "title}", "{title.upper}"]


@pytest.mark.parametrize("template", BAD_TEMPLATES)
def test_a_label_template_with_more_than_plain_fields_is_refused(kb: KnowledgeBase, template: str) -> None:
    kb.add("templates hold", id="a", corpus="code", title="T", metadata={"path": "p.py"})
    with pytest.raises(InvalidInputError, match="label template"):
        kb.set_label_template("code", template)
    assert kb.label_templates() == {}
    assert kb.search("templates").hits[0].source_label == "[code: T]"


@pytest.mark.parametrize(("template", "label"), [
    ("[code: {path}:{line}]", "[code: p.py:7]"), ("[{kind}: {title:.3}]", "[code: Tit]"),
    ("[{title:>8}]", "[   Title]"), ("[{2fa}|{id}|{corpus}|{missing}]", "[yes|a|code|]"),
])
def test_plain_label_templates_still_render(kb: KnowledgeBase, template: str, label: str) -> None:
    kb.add("templates hold", id="a", corpus="code", kind="code", title="Title",
           metadata={"path": "p.py", "line": 7, "2fa": "yes"})
    kb.set_label_template("code", template)
    assert kb.search("templates").hits[0].source_label == label


def test_a_stored_attribute_template_is_never_rendered(kb: KnowledgeBase) -> None:
    """A store written before the check may hold one: it falls back to the default label."""
    kb.add("templates hold", id="a", corpus="code", title="T")
    kb.backend.set_meta("label_templates", json.dumps({"code": "{title.__class__.__mro__}"}))
    label = kb.search("templates").hits[0].source_label
    assert label == "[code: T]" and "class" not in label


# -- 5. what reaches the embedder is capped ----------------------------------------------------


class _CappedHashing(HashingEmbedder):
    max_chars = 20


def test_text_past_max_chars_never_reaches_the_model(tmp_path: Path) -> None:
    model = _CappedHashing(16)
    head = "alpha beta gamma del"  # 20 characters
    long = head + "ta epsilon zeta" * 1000
    assert (model.embed_query(long) == model.embed_batch([head])[0]).all()
    assert (model.embed_documents([long, "x"])[0] == model.embed_batch([head])[0]).all()
    with hybridkb.open(tmp_path / "kb.db", embedder=model) as kb:
        kb.add(long, id="a")
        stored = codec.stored(model.embed_batch([head])[0])  # kept at half precision
        assert (kb.backend.vectors_for(["a"])["a"] == stored).all()


def test_the_default_models_cut_keeps_every_token_it_reads() -> None:
    """Cutting at max_chars loses nothing the model reads (its first 256 tokens), on real prose
    and code: the project's own docs and sources."""
    from hybridkb.embedding.minilm import MAX_TOKENS, MiniLMEmbedder, _load

    model = MiniLMEmbedder()
    tokenizer, _ = _load()
    root = Path(__file__).resolve().parent.parent
    texts = [p.read_text(encoding="utf-8") for p in sorted(root.glob("docs/*.md"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((root / "src" / "hybridkb").glob("*.py"))]
    long = [t for t in texts if len(t) > model.max_chars]  # type: ignore[operator]
    assert len(long) >= 5
    for text in long:
        assert tokenizer.encode(model.clip(text)).ids[:MAX_TOKENS - 1] == \
            tokenizer.encode(text).ids[:MAX_TOKENS - 1]
    assert model.clip("x" * 10_000_000) == "x" * model.max_chars  # type: ignore[operator]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize(("tool", "args", "field"), [
    ("search", {"query": "storage " * 1251}, "query"),
    ("recall", {"query": "q" * 10_001}, "query"),
    ("remember", {"text": "m" * 100_001}, "text"),
])
async def test_mcp_refuses_oversized_text_fields(tmp_path: Path, tool: str, args: dict[str, Any],
                                                 field: str) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    from mcp import Client

    from hybridkb.mcp import build_server

    with hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(8)) as kb:
        kb.add("storage notes", id="a")
        async with Client(build_server(kb)) as client:
            result = await client.call_tool(tool, args)
            ok = await client.call_tool(tool, {k: v[:50] for k, v in args.items()})
        assert result.is_error
        message = result.content[0].text  # type: ignore[union-attr]
        assert field in message and "at most" in message and "Traceback" not in message
        assert not ok.is_error
        assert kb.count() == (2 if tool == "remember" else 1)


# -- 7. a store made by a newer hybridkb is read, never written --------------------------------


def _record_migration(target: str, name: str) -> None:
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", [name])
    else:
        import sqlite3

        conn = sqlite3.connect(target)
        with conn:
            conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)", (name,))
        conn.close()


def test_a_newer_schema_opens_for_reading_and_refuses_every_write(target: str) -> None:
    with hybridkb.open(target, embedder=HashingEmbedder(8)) as kb:
        kb.add("written by the old version", id="a")
    _record_migration(target, "007_future_columns")
    with pytest.warns(hybridkb.NewerSchemaWarning, match=r"newer hybridkb \(schema 7\); upgrade"), \
            hybridkb.open(target, embedder=HashingEmbedder(8)) as kb:
        assert kb.get("a").text == "written by the old version"
        assert kb.search("written").ids == ["a"]
        assert "schema 7" in kb.stats()["read_only"]
        writes = [lambda: kb.add("new", id="b"), lambda: kb.upsert("changed", id="a"),
                  lambda: kb.delete("a"), lambda: kb.set_label_template("default", "[{title}]"),
                  lambda: kb.search("written", touch=True), kb.purge_expired]
        for write in writes:
            with pytest.raises(hybridkb.StoreError, match=r"made by a newer hybridkb \(schema 7\); upgrade"):
                write()
        assert [it.text for it in kb.iter_items()] == ["written by the old version"]
    with pytest.warns(hybridkb.NewerSchemaWarning), hybridkb.open(target, embedder=HashingEmbedder(16)) as kb:
        with pytest.raises(hybridkb.StoreError, match="newer hybridkb"):
            kb.reembed()
        assert kb.count() == 1 and kb.embedder_name == "hashing-8@1"  # nothing switched


# -- 4. disk full and damage are StoreErrors naming the cause; check and repair ----------------


def _raw(target: str):  # type: ignore[no-untyped-def]
    """A connection of our own to the store's database (sqlite-vec loaded for SQLite)."""
    if target.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(target, autocommit=True)
    from hybridkb.storage.sqlite import driver

    return driver.connect(target, timeout=5)


def test_a_full_disk_is_named_and_nothing_is_half_written(tmp_path: Path) -> None:
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(16))
    kb.add_many([{"text": f"item {i} " + f"word{i} " * 50, "id": f"i{i}"} for i in range(300)])
    # The store's own connection is the one capped: max_page_count holds per connection.
    conn = kb.backend._conn  # type: ignore[attr-defined]
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    # incompressible: a batch of repeated words packs into the pages' free room
    batch = [{"text": f"filler {n} fill{n} " + os.urandom(3000).hex(), "id": f"f{n}"} for n in range(20)]
    with pytest.raises(hybridkb.StoreError, match=r"^disk full: ") as info:
        kb.add_many(batch)
    assert "no transaction is active" not in str(info.value)
    with pytest.raises(hybridkb.StoreError, match=r"^disk full: "):
        kb.upsert("changed " + os.urandom(12_000).hex(), id="i1")  # texts are stored compressed
    assert kb.count() == 300 and kb.get_many([b["id"] for b in batch]) == []
    assert kb.get("i1").text.startswith("item 1 ")
    assert kb.delete_many([f"i{i}" for i in range(10)]) == 10  # deleting still works when full
    assert kb.check()["ok"]
    conn.execute("PRAGMA max_page_count = 1073741823")
    kb.add_many(batch)
    assert kb.count() == 310 and kb.search("fill7", mode="fts").ids[0] == "f7"
    assert kb.check()["problems"] == []
    kb.close()


def _damage(path: Path, table: str) -> int:
    """Overwrite the middle pages of one table (dbstat says which), or of the file."""
    from hybridkb.storage.sqlite import driver

    conn = driver.connect(str(path), timeout=5)
    try:
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno",
                                            (table,))]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    except Exception:  # no dbstat in this SQLite build: the middle of the file
        pages, size = [], 4096
    finally:
        conn.close()
    if not pages:
        pages = list(range(1, path.stat().st_size // 4096 + 1))
    middle = pages[len(pages) // 3: len(pages) // 3 + max(2, len(pages) // 4)]
    with open(path, "r+b") as f:
        for n in middle:
            f.seek((n - 1) * size)
            f.write(b"\xa5" * size)
    return len(middle)


@pytest.mark.parametrize("table", ["items_fts_data", "items", "vec_items"])
def test_a_damaged_file_is_named_and_refuses_writes(tmp_path: Path, table: str) -> None:
    path = tmp_path / "kb.db"
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:
        kb.add_many([{"text": f"item {i} " + f"word{i} " * 30, "id": f"i{i}"} for i in range(1500)])
    copy = tmp_path / "copy.db"
    copy.write_bytes(path.read_bytes())
    assert _damage(copy, table) >= 2
    damaged = "database file is damaged: run `hybridkb check`"
    with hybridkb.open(copy, embedder=HashingEmbedder(16)) as kb:
        errors = []
        for query in ("word7 item", "word1200", "item 77"):
            for mode in ("hybrid", "fts", "vector"):
                try:
                    kb.search(query, mode=mode)
                except hybridkb.StoreError as exc:
                    errors.append(str(exc))
        assert errors and all(damaged in e for e in errors), errors
        with pytest.raises(hybridkb.StoreError, match=damaged):
            kb.add("a write after the damage was seen", id="new")
        report = kb.check()
        assert not report["ok"] and report["problems"]
        assert all(p["fix"].strip() for p in report["problems"])
        assert any("hybridkb export" in p["fix"] for p in report["problems"])
    result = CliRunner().invoke(cli, ["--db", str(copy), "--no-embedder", "check"])
    assert result.exit_code == 1 and "problem: " in result.output and "fix: " in result.output
    assert "Traceback" not in result.output
    with hybridkb.open(path, embedder=HashingEmbedder(16)) as kb:  # the original is untouched
        assert kb.check()["ok"] and kb.count() == 1500


def _break_derived_data(target: str, kb: KnowledgeBase) -> None:
    """Make what derives from the items disagree with them, as a bug or a bad restore would."""
    conn = _raw(target)
    if target.startswith("postgresql://"):
        conn.execute("UPDATE corpus_stats SET n_docs = n_docs + 5")
        conn.execute("DELETE FROM item_vectors WHERE rowid = (SELECT rowid FROM items WHERE id = 'b')")
    else:
        # the derived text index (storage/indexes/) loses item 'a' behind the change log's back
        index = kb.backend._text.current()  # type: ignore[attr-defined]
        rowid = conn.execute("SELECT rowid FROM items WHERE id = 'a'").fetchone()[0]
        index.apply([], [rowid], seq=index.seq)
        conn.execute("DELETE FROM vec_items WHERE rowid = (SELECT rowid FROM items WHERE id = 'b')")
        conn.execute("UPDATE corpus_counts SET n = n + 5")  # the corpora's kept item counts
    conn.close()


def test_check_reports_and_repair_rebuilds_what_derives_from_the_items(target: str) -> None:
    with hybridkb.open(target, embedder=HashingEmbedder(16)) as kb:
        kb.add_many([{"text": "alpha apples", "id": "a"}, {"text": "bravo bananas", "id": "b"},
                     {"text": "charlie cherries", "id": "c"}])
        assert kb.check() == {"target": kb.target, "ok": True, "repaired": [], "problems": []}
        _break_derived_data(target, kb)
        report = kb.check()
        assert not report["ok"] and len(report["problems"]) >= (2 if target.startswith("postgresql") else 3)
        assert all("--repair" in p["fix"] for p in report["problems"])
        assert kb.check()["repaired"] == []  # checking changes nothing
        fixed = kb.check(repair=True)
        assert fixed["ok"] and fixed["problems"] == [] and fixed["repaired"], fixed
        assert any("embedded 1 items again" in line for line in fixed["repaired"])
        assert kb.search("apples", mode="fts").ids == ["a"]
        assert kb.search("bravo bananas", mode="vector").ids[0] == "b"
        assert kb.corpora() == {"default": 3}
        assert kb.check()["ok"]


def test_cli_check_and_repair(tmp_path: Path) -> None:
    db = str(tmp_path / "kb.db")
    with hybridkb.open(db, embedder=HashingEmbedder(16)) as kb:
        kb.add_many([{"text": "alpha apples", "id": "a"}, {"text": "bravo bananas", "id": "b"}])
        _break_derived_data(db, kb)
    run = CliRunner().invoke
    result = run(cli, ["--db", db, "--embedder", "hashing-16", "check"])
    assert result.exit_code == 1 and "missing from the text index" in result.output and "--repair" in result.output
    result = run(cli, ["--db", db, "--embedder", "hashing-16", "--json", "check", "--repair"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and any("derived text and vector indexes" in line for line in report["repaired"])
    result = run(cli, ["--db", db, "--embedder", "hashing-16", "check"])
    assert result.exit_code == 0 and "ok: no problems found" in result.output


# -- 9. Chinese, Japanese and Korean words are found inside unspaced sentences -----------------

CJK_DOCS = {
    "ja1": "東京の天気は晴れです。明日は雨が降るでしょう。",
    "ja2": "大阪の夏はとても暑いです",
    "zh1": "我们的数据库系统运行得很快",
    "zh2": "北京是中国的首都，人口众多",
    "ko1": "서울은 한국의 수도입니다",
    "ko2": "부산에는 아름다운 해변이 있습니다",
    "en1": "The weather in Tokyo is sunny",
}


@pytest.mark.parametrize(("query", "expected"), [
    ("東京", ["ja1"]), ("天気", ["ja1"]), ("晴れ", ["ja1"]), ("大阪", ["ja2"]),
    ("数据库", ["zh1"]), ("首都", ["zh2"]), ("北京", ["zh2"]),
    ("서울", ["ko1"]), ("수도", ["ko1"]), ("해변", ["ko2"]),
    ("東京の天気", ["ja1"]), ('"数据库系统"', ["zh1"]), ("weather tokyo", ["en1"]),
])
def test_cjk_words_inside_unspaced_text_are_found(fts_kb: KnowledgeBase, query: str,
                                                 expected: list[str]) -> None:
    fts_kb.add_many([{"id": k, "text": v} for k, v in CJK_DOCS.items()])
    assert fts_kb.search(query, mode="fts").ids[:1] == expected
    assert set(fts_kb.search(query, mode="fts").ids) == set(expected)


def test_cjk_titles_rewrites_and_deletes_keep_the_index_exact(fts_kb: KnowledgeBase) -> None:
    fts_kb.add("本文", id="t", title="データベースの設計")
    assert fts_kb.search("設計", mode="fts").ids == ["t"]
    fts_kb.upsert("新しい本文", id="t", title="東京タワー")
    assert fts_kb.search("設計", mode="fts").ids == [] and fts_kb.search("タワー", mode="fts").ids == ["t"]
    fts_kb.delete("t")
    assert fts_kb.search("タワー", mode="fts").ids == []
    assert fts_kb.check()["ok"]


def test_a_sqlite_store_made_before_cjk_indexing_is_reindexed_on_open(tmp_path: Path) -> None:
    """Migration 002 re-indexes the CJK text an older store already holds."""
    from hybridkb.storage import migrations
    from hybridkb.storage.sqlite import driver

    path = str(tmp_path / "old.db")
    conn = driver.connect(path, timeout=5)
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL DEFAULT 0)")
    name, script = migrations.load("sqlite")[0]
    for statement in driver.split_sql(script):
        conn.execute(statement)
    conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
    conn.execute("INSERT INTO items (id, corpus, text, created_at, updated_at, content_hash) "
                 "VALUES ('old', 'default', '東京の天気は晴れです', 0, 0, 'h')")
    assert conn.execute("SELECT rowid FROM items_fts WHERE items_fts MATCH '天気'").fetchall() == []
    conn.close()
    with hybridkb.open(path, embedder=None) as kb:
        assert kb.search("天気", mode="fts").ids == ["old"]
        assert kb.check()["ok"]


def test_a_postgres_store_made_before_cjk_indexing_is_reindexed_on_open(pg_url: str) -> None:
    import psycopg

    with hybridkb.open(pg_url, embedder=None) as kb:
        kb.add("東京の天気は晴れです", id="old")
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to the schema before 002
        conn.execute("CREATE OR REPLACE FUNCTION hybridkb_words(value text) RETURNS text "
                     "LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE "
                     "AS $$ SELECT regexp_replace(value, '[!-/:-@\\[-`{-~]+', ' ', 'g') $$")
        conn.execute("DROP FUNCTION hybridkb_cjk(text)")
        conn.execute("UPDATE items SET text = text")
        conn.execute("DELETE FROM schema_migrations WHERE name = '002_cjk_fts'")
        found = conn.execute("SELECT count(*) FROM items WHERE tsv @@ phraseto_tsquery('english', '天気')")
        assert found.fetchone() == (0,)
    with hybridkb.open(pg_url, embedder=None) as kb:
        assert kb.search("天気", mode="fts").ids == ["old"]
        assert kb.check()["ok"]
