"""What the search page reads from the REST API: snippets with their lines, facets over the
candidate pool, an item's surrounding lines; through Starlette's TestClient on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import hybridkb
from hybridkb import KnowledgeBase

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from hybridkb.model import Hit
from hybridkb.web import web_app
from hybridkb.web.facets import facet_counts, top_folders
from hybridkb.web.highlight import hit_snippet

TOKEN = "page-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

STORE_PY = '''"""Where the application keeps its data."""

import sqlite3


def open_store(path):
    """Open the local storage file (SQLite, WAL mode)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def close_store(conn):
    """Checkpoint and close."""
    conn.close()
'''
GUIDE_MD = "# Guide\n\nIntro words.\n\n## Storage\n\nLocal storage lives in **SQLite**.\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src" / "app").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app" / "store.py").write_text(STORE_PY)
    (root / "docs" / "guide.md").write_text(GUIDE_MD)
    return root


@pytest.fixture
def client(kb: KnowledgeBase, project: Path) -> Iterator[TestClient]:
    hybridkb.index_folder(kb, project, "code")
    kb.remember("Use SQLite for local storage: one file, WAL mode.", kind="decision")
    kb.add("Deploy: run migrations,\nwarm the cache,\nthen switch traffic.", corpus="wiki",
           kind="wiki_page", title="Deploying")
    with TestClient(web_app(kb, token=TOKEN), base_url="http://127.0.0.1:8765") as c:
        yield c


def search(c: TestClient, **params: Any) -> dict[str, Any]:
    r = c.get("/api/search", params=params, headers=AUTH)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def test_snippets_keep_their_lines_and_a_file_chunk_its_first_line(client: TestClient) -> None:
    data = search(client, q="open_store sqlite connect", path="src/app/store.py", limit=1)
    hit = data["hits"][0]
    assert hit["metadata"]["symbol"] == "open_store"
    lines = hit["snippet"].split("\n")
    assert lines[0] == "def open_store(path):" and "    conn = sqlite3.connect(path)" in lines
    assert hit["snippet_line"] == hit["metadata"]["start_line"] == 6
    marked = {hit["snippet"][s:e].lower() for s, e in hit["highlights"]}
    assert {"sqlite", "connect"} <= marked
    wiki = search(client, q="warm cache", corpus="wiki")["hits"][0]
    assert wiki["snippet"] == "Deploy: run migrations,\nwarm the cache,\nthen switch traffic."
    assert wiki["snippet_line"] is None


def test_facets_count_the_candidate_pool_and_the_page_is_cut_from_it(client: TestClient) -> None:
    plain = search(client, q="local storage sqlite", limit=2)
    assert "facets" not in plain
    data = search(client, q="local storage sqlite", limit=2, facets="true")
    assert [h["id"] for h in data["hits"]] == [h["id"] for h in plain["hits"]]
    pool = data["facet_pool"]
    assert pool > 2
    facets = data["facets"]
    assert sum(v["count"] for v in facets["corpus"]) == pool
    assert {v["value"] for v in facets["corpus"]} >= {"code", "memory"}
    assert {"value": "decision", "count": 1} in facets["kind"]
    assert {v["value"] for v in facets["language"]} == {"python", "markdown"}
    assert {v["value"] for v in facets["folder"]} == {"src/app/", "docs/"}
    second = search(client, q="local storage sqlite", limit=2, offset=2, facets="true")
    assert second["facets"] == facets
    assert [h["id"] for h in second["hits"]] == \
        [h["id"] for h in search(client, q="local storage sqlite", limit=4)["hits"]][2:]


def test_a_facet_value_filters(client: TestClient) -> None:
    data = search(client, q="storage", language="markdown", facets="true")
    assert data["hits"] and all(h["metadata"]["language"] == "markdown" for h in data["hits"])
    assert data["facets"]["language"] == [{"value": "markdown", "count": len(data["hits"])}]
    r = client.post("/api/search", json={"query": "storage", "languages": ["python"], "facets": True},
                    headers=AUTH)
    assert r.status_code == 200 and r.json()["facets"]["language"][0]["value"] == "python"


def test_an_item_brings_the_lines_around_it_from_its_file(client: TestClient, project: Path) -> None:
    hit = search(client, q="close_store", path="src/app/store.py", limit=1)["hits"][0]
    assert hit["metadata"]["symbol"] == "close_store"
    r = client.get(f"/api/items/{quote(hit['id'], safe='')}", params={"context": 3}, headers=AUTH)
    assert r.status_code == 200, r.text
    ctx = r.json()["context"]
    start, end = ctx["start_line"], ctx["end_line"]
    assert ctx["source"] == "file" and ctx["path"] == "src/app/store.py"
    assert ctx["first"] == start - 3
    assert ctx["lines"] == STORE_PY.split("\n")[start - 4:end]  # the file ends there
    assert ctx["lines"][start - ctx["first"]] == "def close_store(conn):"
    # without `context`, none
    assert "context" not in client.get(f"/api/items/{quote(hit['id'], safe='')}", headers=AUTH).json()
    # the file changed since it was indexed: its lines may have moved, so the store's chunks answer
    (project / "src" / "app" / "store.py").write_text("# a new first line\n" + STORE_PY)
    ctx = client.get(f"/api/items/{quote(hit['id'], safe='')}", params={"context": 50}, headers=AUTH).json()["context"]
    assert ctx["source"] == "store" and ctx["first"] == 1
    assert ctx["lines"][start - 1] == "def close_store(conn):"
    old = STORE_PY.split("\n")
    # each line as indexed; those no chunk holds (the blank lines between them) are null
    assert [line for line in ctx["lines"] if line is not None] == \
        [old[n] for n, line in enumerate(ctx["lines"]) if line is not None]
    assert None in ctx["lines"] and "def open_store(path):" in ctx["lines"]


def test_context_never_reads_a_file_the_index_did_not(client: TestClient, kb: KnowledgeBase,
                                                      project: Path) -> None:
    secret = project.parent / "secret.txt"
    secret.write_text("password=hunter2\n")
    (project / ".env").write_text("TOKEN=abc\n")
    for path in ("../secret.txt", str(secret), ".env"):
        forged = kb.add("forged", corpus="code", metadata={"path": path, "start_line": 1,
                                                            "file_hash": "0" * 64})
        ctx = client.get(f"/api/items/{quote(forged, safe='')}", params={"context": 5}, headers=AUTH).json()["context"]
        assert ctx["source"] == "store" and ctx["lines"] == ["forged"], path
    note = search(client, q="deploy", corpus="wiki")["hits"][0]["id"]
    assert client.get(f"/api/items/{note}", params={"context": 5}, headers=AUTH).json()["context"] is None
    for bad in ("-1", "1000", "many"):
        r = client.get(f"/api/items/{note}", params={"context": bad}, headers=AUTH)
        assert r.status_code == 400 and "context must be an integer" in r.json()["error"]["message"]


# -- pure ---------------------------------------------------------------------------------------

def test_top_folders_leave_out_a_folder_that_only_wraps_one() -> None:
    paths = ["code/starlette/middleware/cors.py", "code/starlette/routing.py", "code/starlette/app.py",
             "docs/using-npm/scope.md", "README.md"]
    assert top_folders(paths) == [
        {"value": "code/starlette/", "count": 3},
        {"value": "code/starlette/middleware/", "count": 1},
        {"value": "docs/using-npm/", "count": 1},
    ]
    assert top_folders(["a.py"]) == []


def test_facet_counts_skip_empty_facets() -> None:
    hits = [Hit(id="a", corpus="memory", text="x", score=1.0, kind="decision"),
            Hit(id="b", corpus="memory", text="y", score=0.5)]
    assert facet_counts(hits) == {"corpus": [{"value": "memory", "count": 2}],
                                  "kind": [{"value": "decision", "count": 1}]}


def test_hit_snippet_keeps_lines_and_numbers_file_chunks() -> None:
    text = "\n".join(f"line {i}" for i in range(1, 30)) + "\nthe needle here\nafter"
    cut, first = hit_snippet(text, "needle", 100)
    assert "the needle here" in cut.split("\n") and first is not None and first > 100
    assert len(cut.split("\n")) <= 8
    cut, first = hit_snippet("one long line " * 40, "line", None)
    assert first is None and "\n" not in cut and len(cut) <= 241
