"""Issue 40's attacks on the REST API and MCP, each a test, on both backends where the store
matters: a server limited with --corpora never touches or reveals what it cannot see; every
error is JSON with a fitting status; the REST schema is strict; corpus creation is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hybridkb import KnowledgeBase

pytest.importorskip("starlette")
pytest.importorskip("mcp.server.mcpserver")

from mcp import Client
from starlette.testclient import TestClient

from hybridkb.mcp import build_server
from hybridkb.web import web_app

TOKEN = "attack-token"
BASE = "http://127.0.0.1:8765"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET_TEXT = "the launch code is swordfish"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hidden(kb: KnowledgeBase) -> KnowledgeBase:
    """A store with an item in a corpus the servers below may not see, and one they may."""
    kb.add(SECRET_TEXT, id="SECRET1", corpus="secret", metadata={"acl": "admin"})
    kb.add("public notes about the launch", id="PUB1", corpus="pub")
    return kb


@pytest.fixture
def limited(hidden: KnowledgeBase) -> Iterator[TestClient]:
    with TestClient(web_app(hidden, token=TOKEN, corpora=["pub"]), base_url=BASE) as c:
        yield c


def _unchanged(kb: KnowledgeBase) -> None:
    item = kb.get("SECRET1")
    assert (item.text, item.corpus, item.metadata) == (SECRET_TEXT, "secret", {"acl": "admin"})


def _shape(r: Any, item_id: str) -> tuple[int, str]:
    """A response with the id asked for blanked: what a prober compares."""
    return r.status_code, r.text.replace(item_id, "<id>")


# -- 1. a restricted server -----------------------------------------------------------------------

def test_restricted_server_never_replaces_a_hidden_item(hidden: KnowledgeBase,
                                                        limited: TestClient) -> None:
    r = limited.post("/api/items", json={"id": "SECRET1", "text": "overwritten", "corpus": "pub",
                                         "replace": True}, headers=AUTH)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["type"] == "not_found"
    r = limited.post("/api/items", json={"id": "SECRET1", "text": "overwritten", "replace": True},
                     headers=AUTH)
    assert r.status_code == 404, r.text
    _unchanged(hidden)
    assert hidden.count("pub") == 1


@pytest.mark.parametrize("replace", [False, True])
def test_restricted_server_answers_a_hidden_id_as_it_answers_a_free_one(
        hidden: KnowledgeBase, limited: TestClient, replace: bool) -> None:
    """Whatever a client tries with an id, a hidden item's id and an unused one look alike."""
    def attempt(item_id: str) -> tuple[int, str]:
        body = {"id": item_id, "text": "probe", "corpus": "pub", "replace": replace}
        return _shape(limited.post("/api/items", json=body, headers=AUTH), item_id)

    probe, free = attempt("SECRET1"), attempt("NO-SUCH-ID")
    assert probe == free
    assert probe[0] in (400, 404)
    for method in ("GET", "DELETE"):
        assert _shape(limited.request(method, "/api/items/SECRET1", headers=AUTH), "SECRET1") == \
            _shape(limited.request(method, "/api/items/NO-SUCH-ID", headers=AUTH), "NO-SUCH-ID")
    _unchanged(hidden)
    assert hidden.get_many(["NO-SUCH-ID"]) == []


def test_restricted_server_still_writes_and_replaces_its_own_items(
        hidden: KnowledgeBase, limited: TestClient) -> None:
    r = limited.post("/api/items", json={"text": "a new public note", "corpus": "pub"}, headers=AUTH)
    assert r.status_code == 201, r.text
    new_id = r.json()["id"]
    assert hidden.get(new_id).corpus == "pub"
    r = limited.post("/api/items", json={"id": "PUB1", "text": "public notes, edited", "replace": True},
                     headers=AUTH)
    assert r.status_code == 201, r.text
    assert hidden.get("PUB1").text == "public notes, edited"
    r = limited.post("/api/items", json={"id": "PUB1", "text": "again"}, headers=AUTH)
    assert r.status_code == 400 and "already exists" in r.json()["error"]["message"]
    _unchanged(hidden)


def test_restricted_server_reveals_nothing_of_a_hidden_corpus(hidden: KnowledgeBase,
                                                              limited: TestClient) -> None:
    for q in ("swordfish", "launch code", "SECRET1"):
        for mode in ("hybrid", "fts", "vector"):
            r = limited.get("/api/search", params={"q": q, "mode": mode}, headers=AUTH)
            assert r.status_code == 200, r.text
            assert "SECRET1" not in str(r.json()["hits"]) and "swordfish" not in str(r.json()["hits"])
    r = limited.post("/api/search", json={"query": "swordfish", "filters": {"metadata": {"acl": "admin"}}},
                     headers=AUTH)
    assert r.status_code == 200 and r.json()["hits"] == []
    for path in ("/api/stats", "/api/corpora"):
        assert "secret" not in limited.get(path, headers=AUTH).text
    stats = limited.get("/api/stats", headers=AUTH).json()
    assert stats["items"] == 1 and stats["corpora"] == {"pub": 1}
    assert "awaiting_embedding" not in stats and "items_without_vectors" not in stats  # store-wide
    # remember takes no id: a memory can never land on a hidden one
    r = limited.post("/api/remember", json={"text": "x", "id": "SECRET1"}, headers=AUTH)
    assert r.status_code == 400
    _unchanged(hidden)


@pytest.mark.anyio
async def test_restricted_mcp_server_never_touches_a_hidden_item(hidden: KnowledgeBase) -> None:
    async with Client(build_server(hidden, corpora=["pub"])) as client:
        forget_hidden = await client.call_tool("forget", {"id": "SECRET1"})
        forget_free = await client.call_tool("forget", {"id": "NO-SUCH-ID"})
        got = await client.call_tool("get", {"ids": ["SECRET1", "NO-SUCH-ID", "PUB1"]})
        found = await client.call_tool("search", {"query": "swordfish launch code"})
        rrf = await client.call_tool("search", {"query": "swordfish", "merge": "rrf"})
        recalled = await client.call_tool("recall", {"query": "swordfish"})
        await client.call_tool("remember", {"text": "sneaky", "id": "SECRET1"})
    assert forget_hidden.is_error and forget_free.is_error
    assert forget_hidden.content[0].text.replace("SECRET1", "<id>") == \
        forget_free.content[0].text.replace("NO-SUCH-ID", "<id>")  # type: ignore[union-attr]
    assert got.structured_content is not None
    assert [it["id"] for it in got.structured_content["items"]] == ["PUB1"]
    assert got.structured_content["missing"] == ["SECRET1", "NO-SUCH-ID"]
    for result in (found, rrf, recalled):
        assert result.structured_content is not None
        assert all(h["corpus"] == "pub" for h in result.structured_content["hits"])
        assert "swordfish" not in str(result.structured_content["hits"])
    _unchanged(hidden)
