"""The MCP server with a real MCP client: in-process, over stdio (spawned) and over HTTP."""

from __future__ import annotations

import json
import os
import select
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from serving import running_server

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

pytest.importorskip("mcp.server.mcpserver")

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from hybridkb import mcp as mcp_server
from hybridkb.cli import cli
from hybridkb.mcp import build_server, check_http_binding, snippet

ALL_TOOLS = {"search", "recall", "get", "list_corpora", "remember", "forget"}
READ_TOOLS = {"search", "recall", "get", "list_corpora"}
HIT_KEYS = {"id", "corpus", "title", "kind", "snippet", "score", "source"}
FILE_KEYS = {"url", "path", "line", "start_line", "end_line"}  # left out when null

LONG_WIKI = (
    "Storage overview. " + "Background material about the project and its history. " * 6
    + "The migration_032 script adds the items table and moves local storage to SQLite. "
    + "Closing remarks about unrelated matters follow here. " * 6
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def seed(kb: KnowledgeBase) -> dict[str, str]:
    return {
        "wiki": kb.add(LONG_WIKI, title="Storage", kind="wiki_page", corpus="wiki",
                       source_url="https://wiki.example/storage"),
        "code": kb.add("def connect(): return sqlite3.connect(path)", title="src/db.py",
                       kind="code", corpus="code"),
        "memory": kb.remember("Use SQLite for local storage", kind="decision"),
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, dict[str, str]]]:
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(64))
    ids = seed(kb)
    yield kb, ids
    kb.close()


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # The text block carries the same data, compact, for clients that only read text.
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    out: dict[str, Any] = result.structured_content
    return out


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text
    return text


# -- snippet (pure) ---------------------------------------------------------------------------

def test_snippet_keeps_short_text_and_collapses_whitespace() -> None:
    assert snippet("  one\n\ttwo   three ", "two") == "one two three"


def test_snippet_windows_around_the_matched_terms() -> None:
    out = snippet(LONG_WIKI, "migration_032 sqlite", width=120)
    assert "migration_032" in out and "SQLite" in out
    assert out.startswith("…") and out.endswith("…")
    assert len(out) <= 122


def test_snippet_prefers_the_window_with_most_distinct_terms() -> None:
    text = "alpha " + "filler " * 40 + "alpha beta gamma " + "filler " * 40
    out = snippet(text, "alpha beta gamma", width=60)
    assert "alpha beta gamma" in out


def test_snippet_without_a_match_returns_the_beginning() -> None:
    out = snippet(LONG_WIKI, "zebra", width=80)
    assert out.startswith("Storage overview.") and out.endswith("…")


def test_snippet_matches_word_prefixes_case_insensitively() -> None:
    assert "migration_032" in snippet(LONG_WIKI, "MIGRAT", width=80)


# -- in-process ---------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_tools_have_descriptions_and_schemas(store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    async with Client(build_server(store[0])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == ALL_TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 30
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
    search = tools["search"].input_schema
    assert search["required"] == ["query"]
    assert set(search["properties"]) == {"query", "corpora", "kinds", "filters", "limit", "mode", "path",
                                         "language", "merge"}
    assert search["properties"]["mode"]["enum"] == ["hybrid", "fts", "vector"]
    assert tools["search"].annotations is not None and tools["search"].annotations.read_only_hint


@pytest.mark.anyio
async def test_search_returns_compact_hits(store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    kb, ids = store
    async with Client(build_server(kb)) as client:
        out = data(await client.call_tool("search", {"query": "migration_032", "limit": 3}))
    assert out["answered_by"] == "hybrid" and out["degraded"] is False
    assert all(HIT_KEYS <= set(hit) <= HIT_KEYS | FILE_KEYS for hit in out["hits"])
    assert all(v is not None for hit in out["hits"] for k, v in hit.items() if k in FILE_KEYS)
    top = next(hit for hit in out["hits"] if hit["id"] == ids["wiki"])
    assert top["corpus"] == "wiki" and top["title"] == "Storage"
    assert top["source"] == "[wiki: Storage]" and top["url"] == "https://wiki.example/storage"
    assert "migration_032" in top["snippet"] and len(top["snippet"]) < len(LONG_WIKI) / 2


@pytest.mark.anyio
async def test_search_filters_by_corpus_kind_and_mode(
        store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    kb, ids = store
    async with Client(build_server(kb)) as client:
        by_corpus = data(await client.call_tool("search", {"query": "sqlite", "corpora": ["code"]}))
        by_kind = data(await client.call_tool("search", {"query": "sqlite", "kinds": ["decision"]}))
        fts = data(await client.call_tool("search", {"query": "sqlite", "mode": "fts"}))
    assert [h["id"] for h in by_corpus["hits"]] == [ids["code"]]
    assert [h["id"] for h in by_kind["hits"]] == [ids["memory"]]
    assert fts["mode"] == "fts" and fts["answered_by"] == "fts" and not fts["degraded"]


@pytest.mark.anyio
async def test_search_merges_corpora_as_asked(tmp_path: Path) -> None:
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(64))
    kb.add_many([{"id": "a1", "text": "sqlite data sqlite data", "corpus": "alpha"},
                 {"id": "a2", "text": "sqlite data notes", "corpus": "alpha"},
                 {"id": "a3", "text": "sqlite storage of data", "corpus": "alpha"},
                 {"id": "b1", "text": "data", "corpus": "beta"}])
    try:
        async with Client(build_server(kb)) as client:
            args = {"query": "sqlite data", "limit": 4, "mode": "fts"}
            default = data(await client.call_tool("search", args))
            rrf = data(await client.call_tool("search", {**args, "merge": "rrf"}))
            bad = await client.call_tool("search", {**args, "merge": "loudest"})
        # by relevance the one-word match comes last; interleaved by rank it comes second
        assert [h["id"] for h in default["hits"]][-1] == "b1"
        assert [h["id"] for h in rrf["hits"]][1] == "b1"
        assert [h["id"] for h in rrf["hits"]] == [
            h.id for h in kb.search("sqlite data", mode="fts", limit=4, merge="rrf").hits]
        assert bad.is_error
    finally:
        kb.close()


@pytest.mark.anyio
async def test_hits_from_files_carry_path_lines_and_the_matching_lines(tmp_path: Path) -> None:
    from hybridkb.ingest import index_folder

    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    body = "\n".join(f"    step_{i} = {i}" for i in range(30))
    (root / "src" / "jobs.py").write_text(f"def run_jobs():\n{body}\n    return retry_budget(step_17)\n")
    (root / "docs" / "jobs.md").write_text("# Jobs\n\nThe retry budget of each job.\n")
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(64))
    try:
        index_folder(kb, root, "repo")
        async with Client(build_server(kb)) as client:
            out = data(await client.call_tool("search", {"query": "retry_budget", "path": "src/"}))
            md = data(await client.call_tool("search", {"query": "retry budget", "language": "markdown"}))
    finally:
        kb.close()
    [hit] = out["hits"]
    assert (hit["path"], hit["start_line"], hit["end_line"], hit["line"]) == ("src/jobs.py", 1, 32, 32)
    assert hit["snippet"].splitlines()[-1] == "    return retry_budget(step_17)"
    assert "def run_jobs" not in hit["snippet"]  # centred on the match, not the chunk's start
    assert [h["path"] for h in md["hits"]] == ["docs/jobs.md"]


@pytest.mark.anyio
async def test_get_returns_full_items_and_missing_ids(
        store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    kb, ids = store
    async with Client(build_server(kb)) as client:
        out = data(await client.call_tool("get", {"ids": [ids["wiki"], "nope"]}))
    assert [it["id"] for it in out["items"]] == [ids["wiki"]]
    assert out["items"][0]["text"] == LONG_WIKI and out["items"][0]["title"] == "Storage"
    assert out["missing"] == ["nope"]


@pytest.mark.anyio
async def test_remember_recall_forget(store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    kb, _ = store
    async with Client(build_server(kb)) as client:
        made = data(await client.call_tool("remember", {
            "text": "Deploys go out on Tuesdays only", "kind": "lesson", "scope": "ops",
            "ttl": 3600, "metadata": {"source": "retro"}}))
        new_id = made["id"]
        assert made["corpus"] == "memory" and made["expires_at"] is not None
        recalled = data(await client.call_tool("recall", {"query": "when do deploys go out?"}))
        assert recalled["hits"][0]["id"] == new_id
        assert set(recalled["hits"][0]) == HIT_KEYS  # a memory: no null url / path / line fields
        assert {h["corpus"] for h in recalled["hits"]} == {"memory"}
        scoped = data(await client.call_tool("recall", {"query": "storage", "scope": "ops"}))
        assert [h["id"] for h in scoped["hits"]] == [new_id]
        assert kb.get(new_id).access_count == 2  # recall touches what it returns
        assert kb.get(new_id).metadata == {"source": "retro"}
        gone = data(await client.call_tool("forget", {"id": new_id}))
        assert gone == {"id": new_id, "deleted": True}
        again = error_text(await client.call_tool("forget", {"id": new_id}))
    assert "no item with id" in again
    with pytest.raises(hybridkb.NotFoundError):
        kb.get(new_id)


@pytest.mark.anyio
async def test_list_corpora_with_counts(store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    async with Client(build_server(store[0])) as client:
        out = data(await client.call_tool("list_corpora", {}))
    assert out["corpora"] == [{"name": "code", "count": 1}, {"name": "memory", "count": 1},
                              {"name": "wiki", "count": 1}]
    assert out["vector_search"] is True and out["embedder"] and out["read_only"] is False


@pytest.mark.anyio
@pytest.mark.parametrize(("tool", "args", "expected"), [
    ("search", {"query": "x", "limit": 0}, "limit"),
    ("search", {"query": "x", "mode": "fuzzy"}, "mode"),
    ("search", {}, "query"),
    ("search", {"query": "x", "filters": {"colour": "red"}}, "unknown filter field 'colour'"),
    ("search", {"query": "x", "corpora": ["nope"]}, "unknown corpus 'nope'"),
    ("search", {"query": "x", "kinds": ["a"], "filters": {"kind": "b"}}, "not both"),
    ("remember", {"text": "   "}, "text must be a non-empty string"),
    ("remember", {"text": "x", "ttl": -5}, "ttl"),
    ("get", {"ids": []}, "ids"),
    ("no_such_tool", {}, "Unknown tool"),
])
async def test_bad_arguments_are_tool_errors_with_the_reason(
        store: tuple[KnowledgeBase, dict[str, str]], tool: str, args: dict[str, Any],
        expected: str) -> None:
    async with Client(build_server(store[0])) as client:
        message = error_text(await client.call_tool(tool, args))
    assert expected in message


@pytest.mark.anyio
async def test_read_only_exposes_read_tools_and_writes_nothing(
        store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    kb, ids = store
    before = kb.corpora()
    async with Client(build_server(kb, read_only=True)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        refused = error_text(await client.call_tool("remember", {"text": "sneaky"}))
        recalled = data(await client.call_tool("recall", {"query": "local storage"}))
        listed = data(await client.call_tool("list_corpora", {}))
    assert names == READ_TOOLS
    assert "Unknown tool" in refused
    assert recalled["hits"][0]["id"] == ids["memory"]
    assert kb.get(ids["memory"]).access_count == 0  # no touch on a read-only server
    assert listed["read_only"] is True and kb.corpora() == before


@pytest.mark.anyio
async def test_corpora_limit_what_the_server_sees_and_writes(
        store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    kb, ids = store
    async with Client(build_server(kb, corpora=["wiki", "notes"])) as client:
        listed = data(await client.call_tool("list_corpora", {}))
        found = data(await client.call_tool("search", {"query": "sqlite storage connect"}))
        outside = error_text(await client.call_tool("search", {"query": "x", "corpora": ["code"]}))
        got = data(await client.call_tool("get", {"ids": [ids["code"], ids["wiki"]]}))
        forget = error_text(await client.call_tool("forget", {"id": ids["code"]}))
        made = data(await client.call_tool("remember", {"text": "A wiki-side note"}))
        write_outside = error_text(await client.call_tool(
            "remember", {"text": "x", "corpus": "code"}))
        empty = data(await client.call_tool("search", {"query": "x", "corpora": ["notes"]}))
    assert listed["corpora"] == [{"name": "wiki", "count": 1}, {"name": "notes", "count": 0}]
    assert {h["corpus"] for h in found["hits"]} == {"wiki"}
    assert "not available" in outside and "memory" not in outside
    assert [it["id"] for it in got["items"]] == [ids["wiki"]] and got["missing"] == [ids["code"]]
    assert "no item with id" in forget and kb.get(ids["code"])
    assert made["corpus"] == "wiki"
    assert "not writable" in write_outside
    assert empty["hits"] == [] and empty["answered_by"] == "none"


@pytest.mark.anyio
async def test_degraded_flag_without_embedder(tmp_path: Path) -> None:
    kb = hybridkb.open(tmp_path / "fts.db", embedder=None)
    try:
        seed(kb)
        async with Client(build_server(kb)) as client:
            out = data(await client.call_tool("search", {"query": "migration_032"}))
            nothing = data(await client.call_tool("search", {"query": "zebra"}))
            listed = data(await client.call_tool("list_corpora", {}))
            vector = error_text(await client.call_tool(
                "search", {"query": "x", "mode": "vector"}))
    finally:
        kb.close()
    assert out["answered_by"] == "fts" and out["degraded"] is True
    assert any("no embedder" in n for n in out["notes"])
    assert nothing["hits"] == [] and nothing["degraded"] is True
    assert listed["vector_search"] is False
    assert "needs an embedder" in vector


# -- the command line ---------------------------------------------------------------------------

def test_serve_without_mcp_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if mcp were not installed
    for name in [m for m in sys.modules if m.startswith("hybridkb.mcp")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(hybridkb, "mcp")
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "kb.db"), "--no-embedder", "serve"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: the MCP server needs the mcp package: pip install 'hybridkb[mcp]'"]


def test_http_refuses_non_loopback_without_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "kb.db"), "--no-embedder", "serve",
                                      "--http", "--host", "0.0.0.0"], env={"HYBRIDKB_TOKEN": ""})
    assert result.exit_code == 1
    assert "without a bearer token" in result.output
    assert not (tmp_path / "kb.db").exists()  # refused before opening anything


def test_check_http_binding() -> None:
    assert check_http_binding("0.0.0.0", "t") == ("t", False)
    token, generated = check_http_binding("127.0.0.1", None)
    assert generated and len(token) >= 32
    assert check_http_binding("::1", None)[1] and check_http_binding("localhost", None)[1]
    with pytest.raises(hybridkb.InvalidInputError):
        check_http_binding("192.168.1.5", None)


# -- spawned servers ----------------------------------------------------------------------------

def serve_args(db: Path, *extra: str, embedder: str = "hashing-64") -> list[str]:
    chosen = ["--no-embedder"] if embedder == "none" else ["--embedder", embedder]
    return ["-m", "hybridkb.cli", "--db", str(db), *chosen, "serve", *extra]


@pytest.fixture
def db_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "served.db"
    with hybridkb.open(path, embedder=HashingEmbedder(64)) as kb:
        ids = seed(kb)
    return path, ids


@pytest.mark.anyio
async def test_stdio_every_tool(db_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = db_file
    params = StdioServerParameters(command=sys.executable, args=serve_args(path))
    with anyio.fail_after(20):
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            found = data(await client.call_tool("search", {"query": "migration_032"}))
            made = data(await client.call_tool("remember", {"text": "Prefer uv for installs"}))
            recalled = data(await client.call_tool("recall", {"query": "uv installs"}))
            got = data(await client.call_tool("get", {"ids": [made["id"]]}))
            listed = data(await client.call_tool("list_corpora", {}))
            gone = data(await client.call_tool("forget", {"id": made["id"]}))
            bad = error_text(await client.call_tool("search", {"query": "x", "limit": "many"}))
    assert names == ALL_TOOLS
    assert ids["wiki"] in [h["id"] for h in found["hits"]] and found["answered_by"] == "hybrid"
    assert recalled["hits"][0]["id"] == made["id"]
    assert got["items"][0]["text"] == "Prefer uv for installs"
    assert {c["name"]: c["count"] for c in listed["corpora"]}["memory"] == 2
    assert gone["deleted"] is True
    assert "limit" in bad


@pytest.mark.anyio
async def test_stdio_read_only_and_degraded(db_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = db_file
    params = StdioServerParameters(command=sys.executable,
                                   args=serve_args(path, "--read-only", embedder="none"))
    with anyio.fail_after(20):
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            out = data(await client.call_tool("search", {"query": "migration_032"}))
    assert names == READ_TOOLS
    assert out["answered_by"] == "fts" and out["degraded"] is True


@pytest.mark.anyio
@pytest.mark.parametrize("read_only", [False, True])
async def test_stdio_keeps_a_sample_of_query_vectors_unless_read_only(
        db_file: tuple[Path, dict[str, str]], read_only: bool) -> None:
    """A served store keeps its queries' vectors (storage/asked.py) for its vector index's
    recall; `--read-only` writes nothing, not even those."""
    path, _ = db_file
    extra = ("--read-only",) if read_only else ()
    params = StdioServerParameters(command=sys.executable, args=serve_args(path, *extra))
    with anyio.fail_after(20):
        async with Client(params) as client:
            for query in ("migration_032", "sqlite wal", "uv installs"):
                assert data(await client.call_tool("search", {"query": query}))["answered_by"]
    with sqlite3.connect(path) as conn:
        kept = conn.execute("SELECT count(*) FROM query_vectors").fetchone()[0]
    assert kept == (0 if read_only else 3)


def test_stdio_stdout_carries_only_protocol(db_file: tuple[Path, dict[str, str]]) -> None:
    """A legacy client's raw handshake: every stdout line must be a JSON-RPC message."""
    path, _ = db_file
    proc = subprocess.Popen([sys.executable, *serve_args(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "search", "arguments": {"query": "sqlite"}}},
    ]
    lines: list[bytes] = []
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(b'"id":2' in ln for ln in lines):
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
        proc.stdin.close()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()
    parsed = [json.loads(line) for line in lines]
    assert all(m.get("jsonrpc") == "2.0" for m in parsed)
    answer = next(m for m in parsed if m.get("id") == 2)
    assert answer["result"]["structuredContent"]["answered_by"] == "hybrid"
    assert proc.returncode == 0


@pytest.fixture
def http_server(db_file: tuple[Path, dict[str, str]]) -> Iterator[tuple[str, Path]]:
    path, _ = db_file
    env = {**os.environ, "HYBRIDKB_TOKEN": "s3cret-token"}
    def command(port: int) -> list[str]:
        return [sys.executable, *serve_args(path, "--http", "--port", str(port))]

    with running_server(command, env, start_timeout=20) as port:
        yield f"http://127.0.0.1:{port}/mcp", path


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        yield client


@pytest.mark.anyio
async def test_http_requires_the_token(http_server: tuple[str, Path]) -> None:
    url, path = http_server
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "remember", "arguments": {"text": "intruder"}}}
    with anyio.fail_after(20):
        async with httpx2.AsyncClient() as raw:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"}):
                response = await raw.post(url, json=call, headers={
                    **headers, "Accept": "application/json, text/event-stream"})
                assert response.status_code == 401
                assert response.headers["www-authenticate"].startswith("Bearer")
        with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in a task-group error
            async with http_client(url, None) as client:
                await client.list_tools()
        async with http_client(url, "s3cret-token") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            found = data(await client.call_tool("search", {"query": "migration_032"}))
            listed = data(await client.call_tool("list_corpora", {}))
            made = data(await client.call_tool("remember", {"text": "Rotate the token monthly"}))
    assert names == ALL_TOOLS
    assert found["answered_by"] == "hybrid" and found["hits"]
    assert {c["name"]: c["count"] for c in listed["corpora"]}["memory"] == 1  # no intruder
    with hybridkb.open(path, embedder=HashingEmbedder(64)) as kb:
        assert kb.get(made["id"]).text == "Rotate the token monthly"


def test_old_module_path_still_works_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "hybridkb.mcp_server", raising=False)
    with pytest.warns(DeprecationWarning, match="hybridkb.mcp instead"):
        import hybridkb.mcp_server as old
    assert old.build_server is build_server and old.snippet is snippet


def test_server_module_never_prints(capsys: pytest.CaptureFixture[str],
                                    store: tuple[KnowledgeBase, dict[str, str]]) -> None:
    mcp_server.build_server(store[0], read_only=True, corpora=["wiki"])
    assert capsys.readouterr().out == ""
