"""The REST API and the search page through Starlette's TestClient, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from hybridkb.web import web_app
from hybridkb.web.highlight import location, term_spans
from hybridkb.web.openapi import openapi_document

TOKEN = "s3cret-token"
BASE = "http://127.0.0.1:8765"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def seed(kb: KnowledgeBase) -> dict[str, str]:
    return {
        "code": kb.add("def connect(path):\n    return sqlite3.connect(path)  # local storage",
                       title="src/db.py", kind="code", corpus="code",
                       metadata={"path": "src/db.py", "start_line": 12}),
        "wiki": kb.add("We keep local storage in SQLite; migration_032 adds the items table.",
                       title="Storage", kind="wiki_page", corpus="wiki"),
        "decision": kb.remember("Use SQLite for local storage", kind="decision"),
    }


def client_for(kb: KnowledgeBase, **options: Any) -> TestClient:
    return TestClient(web_app(kb, token=TOKEN, **options), base_url=BASE)


@pytest.fixture
def client(kb: KnowledgeBase) -> Iterator[tuple[TestClient, dict[str, str]]]:
    ids = seed(kb)
    with client_for(kb) as c:
        yield c, ids


@pytest.fixture
def sqlite_kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(64))
    yield kb
    kb.close()


# -- search -------------------------------------------------------------------------------------

def test_search_returns_hits_with_snippet_marks_location_and_explanation(client: Any) -> None:
    c, ids = client
    r = c.get("/api/search", params={"q": "sqlite storage", "corpus": "code"}, headers=AUTH)
    assert r.status_code == 200, r.text
    data = r.json()
    assert [h["id"] for h in data["hits"]] == [ids["code"]]
    hit = data["hits"][0]
    assert hit["source"] == "[code: src/db.py]"
    assert hit["location"] == "src/db.py:12"
    marked = [hit["snippet"][s:e].lower() for s, e in hit["highlights"]]
    assert "sqlite" in marked and "storage" in marked
    explanation = hit["explanation"]
    assert set(explanation["retrievers"]) <= {"fts", "vector"} and explanation["retrievers"]
    for r_ in explanation["retrievers"].values():
        assert r_["rank"] >= 1
    assert explanation["final_score"] == hit["score"]
    assert data["fusion"] in ("calibrated", "rrf", "convex", "dbsf")
    assert data["confidence"] in ("high", "low", "none")
    assert "text" not in hit


def test_search_filters_by_kind_and_path_and_several_corpora(client: Any) -> None:
    c, ids = client
    r = c.get("/api/search", params=[("q", "storage"), ("kind", "decision")], headers=AUTH)
    assert [h["id"] for h in r.json()["hits"]] == [ids["decision"]]
    r = c.get("/api/search", params={"q": "storage", "path": "src/db.py"}, headers=AUTH)
    assert [h["id"] for h in r.json()["hits"]] == [ids["code"]]
    r = c.get("/api/search", params=[("q", "storage"), ("corpus", "wiki"), ("corpus", "memory"),
                                      ("mode", "fts")], headers=AUTH)
    assert {h["id"] for h in r.json()["hits"]} == {ids["wiki"], ids["decision"]}


def test_search_post_with_json_body_and_full_text(client: Any) -> None:
    c, ids = client
    r = c.post("/api/search", json={"query": "migration_032", "corpus": "wiki", "text": True,
                                    "mode": "fts"}, headers=AUTH)
    assert r.status_code == 200, r.text
    hit = r.json()["hits"][0]
    assert hit["id"] == ids["wiki"] and "migration_032 adds the items table" in hit["text"]


@pytest.mark.parametrize("params, needle", [
    ({"q": "x", "limit": "many"}, "limit must be an integer"),
    ({"q": "x", "limit": "0"}, "limit must be an integer from 1"),
    ({"q": "x", "mode": "psychic"}, "mode"),
    ({"q": "x", "fusion": "magic"}, "fusion"),
    ({"q": "x", "filters": "{not json"}, "filters is not valid JSON"),
    ({"q": "x", "filters": '{"colour": "red"}'}, "unknown filter field 'colour'"),
])
def test_bad_search_input_is_a_400_json_error(client: Any, params: dict[str, str], needle: str) -> None:
    c, _ = client
    r = c.get("/api/search", params=params, headers=AUTH)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_input"
    assert needle in r.json()["error"]["message"]


def test_search_post_rejects_corpus_and_corpora_together_and_bad_json(client: Any) -> None:
    c, _ = client
    r = c.post("/api/search", json={"query": "x", "corpus": "a", "corpora": ["b"]}, headers=AUTH)
    assert r.status_code == 400 and "not both" in r.json()["error"]["message"]
    r = c.post("/api/search", content=b"{oops", headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = c.post("/api/search", json=["a list"], headers=AUTH)
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]


def test_oversized_body_is_413_and_nothing_is_written(sqlite_kb: KnowledgeBase) -> None:
    with client_for(sqlite_kb) as c:
        body = b'{"text": "' + b"x" * (4 * 1024 * 1024) + b'"}'
        r = c.post("/api/items", content=body, headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 413 and "over" in r.json()["error"]["message"]
        chunks = iter([b'{"text": "', b"y" * (3 * 1024 * 1024), b"y" * (2 * 1024 * 1024), b'"}'])
        r = c.post("/api/items", content=chunks, headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 413 and "over" in r.json()["error"]["message"]
    assert sqlite_kb.count() == 0


def test_unknown_corpus_is_404(client: Any) -> None:
    c, _ = client
    r = c.get("/api/search", params={"q": "x", "corpus": "nope"}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    assert "nope" in r.json()["error"]["message"]


# -- items, writes ------------------------------------------------------------------------------

def test_get_add_remember_delete_round_trip(client: Any, kb: KnowledgeBase) -> None:
    c, ids = client
    r = c.get(f"/api/items/{ids['code']}", headers=AUTH)
    assert r.status_code == 200
    assert r.json()["text"].startswith("def connect(path)") and r.json()["location"] == "src/db.py:12"
    assert r.json()["source"] == "[code: src/db.py]"

    r = c.post("/api/items", json={"text": "Tokens rotate every 90 days", "corpus": "wiki",
                                   "id": "rot-1", "metadata": {"team": "sec"}}, headers=AUTH)
    assert r.status_code == 201 and r.json() == {"id": "rot-1", "corpus": "wiki"}
    assert kb.get("rot-1").metadata == {"team": "sec"}

    r = c.post("/api/remember", json={"text": "Prefer small PRs", "kind": "lesson", "ttl": 3600},
               headers=AUTH)
    assert r.status_code == 201
    memory = r.json()
    assert memory["corpus"] == "memory" and memory["expires_at"] is not None
    assert kb.get(memory["id"]).kind == "lesson"

    r = c.delete("/api/items/rot-1", headers=AUTH)
    assert r.status_code == 200 and r.json() == {"id": "rot-1", "deleted": True}
    assert kb.get_many(["rot-1"]) == []
    r = c.delete("/api/items/rot-1", headers=AUTH)
    assert r.status_code == 404
    assert c.get("/api/items/rot-1", headers=AUTH).status_code == 404


def test_bad_writes_are_400(client: Any) -> None:
    c, ids = client
    r = c.post("/api/items", json={"text": ""}, headers=AUTH)
    assert r.status_code == 400 and "text must be a non-empty string" in r.json()["error"]["message"]
    r = c.post("/api/items", json={"text": "x", "colour": "red"}, headers=AUTH)
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]
    r = c.post("/api/items", json={"text": "dup", "id": ids["wiki"], "corpus": "wiki"}, headers=AUTH)
    assert r.status_code == 400
    r = c.post("/api/remember", json={"text": "x", "ttl": -1}, headers=AUTH)
    assert r.status_code == 400 and "ttl" in r.json()["error"]["message"]
    r = c.post("/api/remember", json={"kind": "lesson"}, headers=AUTH)
    assert r.status_code == 400 and "needs a text" in r.json()["error"]["message"]


def test_stats_and_corpora(client: Any) -> None:
    c, _ = client
    stats = c.get("/api/stats", headers=AUTH).json()
    assert stats["items"] == 3 and stats["corpora"] == {"code": 1, "wiki": 1, "memory": 1}
    assert stats["version"] == hybridkb.__version__ and stats["read_only"] is False
    corpora = c.get("/api/corpora", headers=AUTH).json()
    assert corpora["corpora"] == [{"name": "code", "count": 1}, {"name": "memory", "count": 1},
                                  {"name": "wiki", "count": 1}]
    assert corpora["vector_search"] is True and corpora["embedder"] == "hashing-64@1"


def test_read_only_and_corpus_limits(sqlite_kb: KnowledgeBase) -> None:
    ids = seed(sqlite_kb)
    with client_for(sqlite_kb, read_only=True, corpora=["wiki"]) as c:
        r = c.post("/api/items", json={"text": "x", "corpus": "wiki"}, headers=AUTH)
        assert r.status_code == 403 and r.json()["error"]["type"] == "read_only"
        assert c.delete(f"/api/items/{ids['wiki']}", headers=AUTH).status_code == 403
        assert sqlite_kb.get(ids["wiki"]).corpus == "wiki"
        assert c.get(f"/api/items/{ids['code']}", headers=AUTH).status_code == 404
        hits = c.get("/api/search", params={"q": "sqlite storage"}, headers=AUTH).json()["hits"]
        assert [h["id"] for h in hits] == [ids["wiki"]]
        assert c.get("/api/search", params={"q": "x", "corpus": "code"}, headers=AUTH).status_code == 404
        assert c.get("/api/stats", headers=AUTH).json()["corpora"] == {"wiki": 1}
        paths = c.get("/api/openapi.json", headers=AUTH).json()["paths"]
        assert "/api/remember" not in paths and "delete" not in paths["/api/items/{item_id}"]


# -- the token, Host and Origin -----------------------------------------------------------------

@pytest.mark.parametrize("method, path", [
    ("GET", "/api/search?q=x"), ("POST", "/api/search"), ("GET", "/api/items/a"),
    ("DELETE", "/api/items/a"), ("POST", "/api/items"), ("POST", "/api/remember"),
    ("GET", "/api/stats"), ("GET", "/api/corpora"), ("GET", "/api/openapi.json"),
])
def test_every_endpoint_needs_the_token(sqlite_kb: KnowledgeBase, method: str, path: str) -> None:
    seed(sqlite_kb)
    before = sqlite_kb.count()
    with client_for(sqlite_kb) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            r = c.request(method, path, headers=headers, json={"text": "sneaky"})
            assert r.status_code == 401, (method, path, headers)
            assert r.json()["error"]["type"] == "unauthorized"
            assert r.headers["www-authenticate"].startswith("Bearer")
    assert sqlite_kb.count() == before


def test_pages_are_shells_and_no_cookie_authorizes(sqlite_kb: KnowledgeBase) -> None:
    ids = seed(sqlite_kb)
    with client_for(sqlite_kb) as c:
        for path in ("/", f"/?q=sqlite&token={TOKEN}", f"/items/{ids['code']}", "/items/missing"):
            r = c.get(path, follow_redirects=False)
            assert r.status_code == 200 and "set-cookie" not in r.headers, path
            assert "sqlite3.connect" not in r.text and "?token=" in r.text  # no data; how to log in
            assert "script-src 'self'" in r.headers["content-security-policy"]
            assert r.headers["referrer-policy"] == "no-referrer"
        # a token cookie (earlier versions set one) opens nothing, and the pages clear it
        c.cookies.set("hybridkb_token", TOKEN)
        assert c.get("/api/stats").status_code == 401
        assert c.get(f"/api/items/{ids['code']}").status_code == 401
        assert c.post("/api/items", json={"text": "planted"}).status_code == 401
        cleared = c.get("/").headers["set-cookie"].lower()
        assert cleared.startswith("hybridkb_token=") and "max-age=0" in cleared
    assert sqlite_kb.count() == 3


def test_foreign_host_and_origin_are_refused(sqlite_kb: KnowledgeBase) -> None:
    seed(sqlite_kb)
    with client_for(sqlite_kb) as c:
        r = c.get("/api/stats", headers={**AUTH, "host": "evil.example:8765"})
        assert r.status_code == 421 and r.json()["error"]["type"] == "bad_host"
        r = c.post("/api/items", json={"text": "csrf"}, headers={**AUTH, "origin": "http://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["type"] == "bad_origin"
        assert sqlite_kb.count() == 3
        ok = c.get("/api/stats", headers={**AUTH, "origin": BASE, "host": "localhost:8765"})
        assert ok.status_code == 403  # origin 127.0.0.1 against host localhost: another site
        ok = c.get("/api/stats", headers={**AUTH, "origin": BASE})
        assert ok.status_code == 200
    with TestClient(web_app(sqlite_kb, token=TOKEN, host="0.0.0.0"),
                    base_url="http://kb.internal:8765") as c:
        assert c.get("/api/stats", headers=AUTH).status_code == 200


# -- pages --------------------------------------------------------------------------------------

def test_static_files_and_item_page_shell_hold_no_stored_text(sqlite_kb: KnowledgeBase) -> None:
    evil = sqlite_kb.add("<script>alert(1)</script> & more", title="<b>bold</b>", corpus="wiki",
                         metadata={"path": "docs/a.md", "start_line": 3, "team": "<i>core</i>"})
    with client_for(sqlite_kb) as c:
        assert "function renderHit" in c.get("/static/app.js").text
        assert "function markdown" in c.get("/static/render.js").text
        assert c.get("/static/style.css").headers["content-type"].startswith("text/css")
        assert c.get("/static/../store.py").status_code == 404
        icon = c.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        assert icon.text.startswith("<svg") and c.get("/static/favicon.svg").text == icon.text
        # the item page is a shell its script fills from /api/items/ID: no stored value in it
        page = c.get(f"/items/{evil}")
        assert page.status_code == 200 and 'src="/static/item.js"' in page.text
        assert "alert" not in page.text and "bold" not in page.text and "docs/a.md" not in page.text
        assert page.text == c.get("/items/missing").text


def test_openapi_describes_every_route() -> None:
    doc = openapi_document()
    assert doc["openapi"] == "3.1.0" and doc["info"]["version"] == hybridkb.__version__
    assert set(doc["paths"]) == {"/api/search", "/api/items", "/api/items/{item_id}", "/api/remember",
                                 "/api/stats", "/api/corpora", "/api/openapi.json"}
    assert set(doc["paths"]["/api/items/{item_id}"]) == {"get", "delete"}


# -- pure helpers -------------------------------------------------------------------------------

def test_term_spans_mark_prefixes_case_insensitively() -> None:
    text = "Migration_032 moves Storage to SQLite; migrations run once."
    spans = term_spans(text, "migrat sqlite")
    assert [text[s:e] for s, e in spans] == ["Migrat", "SQLite", "migrat"]
    assert term_spans(text, "") == [] and term_spans(text, "a") == []
    # stopwords are marked only when the query has nothing else
    assert [text[s:e] for s, e in term_spans(text, "where does the storage go")] == ["Storage"]
    assert [text[s:e] for s, e in term_spans(text, "to")] == ["to"]


def test_location_needs_a_path() -> None:
    assert location({"path": "src/a.py", "start_line": 4}) == "src/a.py:4"
    assert location({"path": "src/a.py"}) == "src/a.py"
    assert location({"path": "src/a.py", "start_line": True}) == "src/a.py"
    assert location({"start_line": 4}) is None
