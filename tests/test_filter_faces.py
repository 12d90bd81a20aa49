"""One meaning of a path, kind and language filter on every face: the Python API (both
backends), the CLI, the MCP tool and the REST API (which the search page calls).

A user stands in `work/`, indexed `work/code` as corpus "code" and `work/docs` as "docs";
the CLI prints hits as `code/starlette/...:2`. Each face gets the same patterns and must
find the same files."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import HashingEmbedder, InvalidFilterError, KnowledgeBase
from hybridkb.cli import cli
from hybridkb.ingest import index_folder
from hybridkb.pathglob import located

FILES = {
    "code/starlette/applications.py": "def app():\n    '''marker words: the application'''\n",
    "code/starlette/middleware/cors.py": "def cors():\n    '''marker words: allow origins'''\n",
    "code/other/cors.py": "def other_cors():\n    '''marker words: another cors'''\n",
    "code/README.md": "# Code\n\nmarker words about the code folder\n",
    "docs/using-npm/scope.md": "# Scope\n\nmarker words about scoped packages\n",
}
STARLETTE = ["starlette/applications.py", "starlette/middleware/cors.py"]


def cases(work: Path) -> list[tuple[str, list[str]]]:
    """(pattern as a user types it, standing in `work/`; the paths found)."""
    return [
        ("starlette/", STARLETTE),                                  # a folder of the indexed tree
        ("code/starlette/", STARLETTE),                             # as the CLI prints it
        ("starlette/**/*.py", STARLETTE),                           # a glob
        ("code/starlette/**/*.py", STARLETTE),                      # a glob as the CLI prints it
        (str(work / "code" / "starlette"), STARLETTE),             # an absolute path
        ("cors.py", ["other/cors.py", "starlette/middleware/cors.py"]),  # a bare file name
        ("code/starlette/middleware/cors.py", ["starlette/middleware/cors.py"]),
        (str(work / "code" / "other" / "cors.py"), ["other/cors.py"]),
        ("docs/using-npm/", ["using-npm/scope.md"]),               # another corpus's folder
        ("nowhere/", []),
    ]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "work"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.chdir(root)
    return root


def seeded(kb: KnowledgeBase, work: Path) -> KnowledgeBase:
    index_folder(kb, work / "code", "code")
    index_folder(kb, work / "docs", "docs")
    kb.remember("marker words in a memory", kind="decision")
    return kb


@pytest.fixture
def db(work: Path) -> Iterator[Path]:
    path = work.parent / "kb.db"
    store = seeded(hybridkb.open(path, embedder=HashingEmbedder(64)), work)
    store.close()
    yield path


def test_located_reads_a_pattern_as_a_place_inside_the_indexed_folders() -> None:
    roots = {"code": "/w/code", "docs": "/w/docs", "one": "/w/notes.md"}
    assert located("/w/code/starlette/", roots) == {"code": "/starlette/"}
    assert located("code/starlette/**/*.py", roots, "/w") == {"code": "/starlette/**/*.py"}
    assert located("/w/code/*.md", roots) == {"code": "/*.md"}
    assert located("/w/code", roots) == {"code": "**"}
    assert located("/w/notes.md", roots) == {"one": "**"}
    assert located("../code/x.py", roots, "/w/docs") == {"code": "/x.py"}
    assert located("/w/codex/x.py", roots) == {}  # a sibling that shares a prefix is not inside
    assert located("cors.py", roots, "/w/code") == {}  # a bare name: any depth, never placed
    assert located("starlette/", roots, "/w") == {}  # /w/starlette is in no indexed folder
    assert located("code/gone/", roots, "/w", exists=lambda p: False) == {}
    assert located("starlette/", roots, None) == {}


# -- the faces -----------------------------------------------------------------------------------

def api_paths(kb: KnowledgeBase, **filters: Any) -> list[str]:
    result = kb.search("marker words", mode="fts", limit=20, filters=filters)
    return sorted(str(h.path) for h in result.hits)


def test_the_python_api(kb: KnowledgeBase, work: Path) -> None:
    seeded(kb, work)
    for pattern, expected in cases(work):
        assert api_paths(kb, path=pattern) == expected, pattern
    assert api_paths(kb, path=["code/starlette/applications.py", "using-npm/"]) == [
        "starlette/applications.py", "using-npm/scope.md"]


def cli_search(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", str(db), "--embedder", "hashing-64", "--json", "search",
                                    "marker words", "--mode", "fts", "--limit", "20", *args])


def test_the_cli(db: Path, work: Path) -> None:
    for pattern, expected in cases(work):
        result = cli_search(db, "--path", pattern)
        assert result.exit_code == 0, result.output
        assert sorted(h["path"] for h in json.loads(result.stdout)["hits"]) == expected, pattern


def test_the_cli_from_inside_the_indexed_folder(db: Path, work: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Standing in code/starlette, `middleware/` is the folder there, and a path as the
    indexed folder names it still works (it is not a place here)."""
    monkeypatch.chdir(work / "code" / "starlette")
    for pattern, expected in (("middleware/", ["starlette/middleware/cors.py"]),
                              ("./applications.py", ["starlette/applications.py"]),
                              ("other/", ["other/cors.py"])):
        result = cli_search(db, "--path", pattern)
        assert sorted(h["path"] for h in json.loads(result.stdout)["hits"]) == expected, pattern


def mcp_call(db: Path, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    pytest.importorskip("mcp.server.mcpserver")
    from mcp import Client

    from hybridkb.mcp import build_server

    async def call() -> tuple[bool, Any]:
        kb = hybridkb.open(db, embedder=HashingEmbedder(64))
        try:
            async with Client(build_server(kb)) as client:
                out = await client.call_tool(tool, arguments)
        finally:
            kb.close()
        if out.is_error:
            return False, out.content[0].text  # type: ignore[union-attr]
        return True, out.structured_content

    return anyio.run(call)


def test_the_mcp_tool(db: Path, work: Path) -> None:
    for pattern, expected in cases(work):
        ok, out = mcp_call(db, "search", {"query": "marker words", "mode": "fts", "limit": 20,
                                          "path": pattern})
        assert ok, out
        assert sorted(h["path"] for h in out["hits"]) == expected, pattern


def rest(db: Path) -> Any:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from hybridkb.web import web_app

    kb = hybridkb.open(db, embedder=HashingEmbedder(64))
    return kb, TestClient(web_app(kb, token="t0ken"), base_url="http://127.0.0.1:8765")


def test_the_rest_api_and_page(db: Path, work: Path) -> None:
    kb, client = rest(db)
    auth = {"Authorization": "Bearer t0ken"}
    try:
        with client:
            for pattern, expected in cases(work):
                got = client.get("/api/search", params={"q": "marker words", "mode": "fts", "limit": 20,
                                                        "path": pattern}, headers=auth)
                assert got.status_code == 200, got.text
                assert sorted(h["path"] for h in got.json()["hits"]) == expected, pattern
                posted = client.post("/api/search", json={"query": "marker words", "mode": "fts",
                                                          "limit": 20, "path": pattern}, headers=auth)
                assert sorted(h["path"] for h in posted.json()["hits"]) == expected, pattern
    finally:
        kb.close()


# -- unknown kinds and languages ---------------------------------------------------------------

UNKNOWN: list[tuple[dict[str, Any], str]] = [
    ({"language": "pyhton"}, "unknown language 'pyhton' (did you mean 'python'?); known: markdown, python"),
    ({"kind": "decisoin"}, "unknown kind 'decisoin' (did you mean 'decision'?)"),
]


def test_unknown_kinds_and_languages_are_errors_with_a_guess(kb: KnowledgeBase, work: Path) -> None:
    seeded(kb, work)
    for filters, message in UNKNOWN:
        with pytest.raises(InvalidFilterError) as caught:
            kb.search("marker words", filters=filters)
        assert str(caught.value).startswith(message)
    # a known kind with nothing stored yet, or one bad value beside a good one: no error
    assert kb.search("marker words", filters={"kind": "lesson"}).hits == []
    assert len(kb.search("marker words", filters={"language": ["pyhton", "markdown"]}).hits) == 2
    assert kb.search("zzzqqq", mode="fts", filters={"language": "python"}).hits == []
    # corpora without any indexed file: a language filter finds nothing, it is no typo
    assert kb.search("marker words", corpus="memory", filters={"language": "pyhton"}).hits == []


@pytest.mark.parametrize(("face", "run"), [
    ("cli", lambda db, f: cli_search(db, *(a for k, v in f.items() for a in (f"--{k}", v)))),
    ("mcp", lambda db, f: mcp_call(db, "search", {"query": "marker words", **{
        ("kinds" if k == "kind" else k): [v] if k == "kind" else v for k, v in f.items()}})),
    ("recall", lambda db, f: mcp_call(db, "recall", {"query": "marker words", "kinds": [f["kind"]]})),
])
def test_unknown_values_on_each_face(db: Path, face: str,
                                     run: Callable[[Path, dict[str, str]], Any]) -> None:
    for filters, message in UNKNOWN:
        if face == "recall" and "kind" not in filters:
            continue  # recall filters by kind and scope only
        out = run(db, filters)
        if face == "cli":
            assert out.exit_code == 1
            assert json.loads(out.stdout)["error"].startswith(message)
        else:
            ok, text = out
            assert not ok and message in text


def test_unknown_values_on_the_rest_api(db: Path) -> None:
    kb, client = rest(db)
    try:
        with client:
            for params, message in (({"kind": "decisoin"}, UNKNOWN[1][1]),
                                    ({"filters": json.dumps({"language": "pyhton"})}, UNKNOWN[0][1])):
                got = client.get("/api/search", params={"q": "marker words", **params},
                                 headers={"Authorization": "Bearer t0ken"})
                assert got.status_code == 400 and message in got.text
    finally:
        kb.close()


def test_the_query_syntax_reads_paths_kinds_and_languages_alike(kb: KnowledgeBase, work: Path) -> None:
    """`path:`, `kind:` and `language:` written in the query mean what the filters mean."""
    seeded(kb, work)
    for pattern, expected in cases(work)[:7]:
        result = kb.search(f"marker words path:{pattern}", mode="fts", limit=20)
        assert sorted(str(h.path) for h in result.hits) == expected, pattern
    with pytest.raises(InvalidFilterError, match=r"unknown kind 'decisoin' \(did you mean 'decision'\?\)"):
        kb.search("marker words kind:decisoin")
    with pytest.raises(InvalidFilterError, match="unknown language 'pyhton'"):
        kb.search("marker words language:pyhton")
