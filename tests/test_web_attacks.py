"""Issue 40's attacks on the REST API and MCP, each a test, on both backends where the store
matters: a server limited with --corpora never touches or reveals what it cannot see; every
error is JSON with a fitting status; the REST schema is strict; corpus creation is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hybridkb import KnowledgeBase
from hybridkb.errors import InvalidInputError, NotFoundError

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


def test_write_limited_to_corpora_checks_the_row_it_replaces(hidden: KnowledgeBase) -> None:
    """`within` is decided by the write's own statement: no check before it to race."""
    with pytest.raises(NotFoundError, match="SECRET1"):
        hidden.upsert("overwritten", id="SECRET1", corpus="pub", within=["pub"])
    with pytest.raises(NotFoundError):  # one refused row: the whole batch is not written
        hidden.upsert_many([{"id": "NEW1", "text": "fresh", "corpus": "pub"},
                            {"id": "SECRET1", "text": "overwritten", "corpus": "pub"}],
                           within=["pub"])
    assert hidden.get_many(["NEW1"]) == []
    assert hidden.upsert("public notes, edited", id="PUB1", corpus="pub", within=["pub"]) == "PUB1"
    assert hidden.get("PUB1").text == "public notes, edited"
    assert hidden.upsert("a new one", id="NEW2", corpus="pub", within=["pub"]) == "NEW2"
    assert hidden.delete("SECRET1", within=["pub", "other"]) is False
    assert hidden.delete("NEW2", within=["pub"]) is True
    with pytest.raises(InvalidInputError, match="list of corpus names"):
        hidden.upsert("x", id="PUB1", corpus="pub", within="pub")  # type: ignore[arg-type]
    _unchanged(hidden)


def test_restricted_server_holds_when_an_item_moves_after_its_check(
        hidden: KnowledgeBase, limited: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another (unrestricted) writer moves PUB1 into the hidden corpus right after the
    server looked it up: the replace and the delete still leave it alone."""
    looked_up = hidden.get_many

    def look_then_move(ids: list[str], **options: Any) -> Any:
        found = looked_up(ids, **options)
        hidden.upsert("moved away", id="PUB1", corpus="secret")
        return found

    monkeypatch.setattr(hidden, "get_many", look_then_move)
    r = limited.post("/api/items", json={"id": "PUB1", "text": "overwritten", "replace": True},
                     headers=AUTH)
    assert r.status_code == 404, r.text
    assert (hidden.get("PUB1").text, hidden.get("PUB1").corpus) == ("moved away", "secret")
    monkeypatch.undo()
    hidden.upsert("public again", id="PUB1", corpus="pub")
    fetched = hidden.get

    def fetch_then_move(item_id: str, **options: Any) -> Any:
        item = fetched(item_id, **options)
        hidden.upsert("moved away", id="PUB1", corpus="secret")
        return item

    monkeypatch.setattr(hidden, "get", fetch_then_move)
    r = limited.delete("/api/items/PUB1", headers=AUTH)
    assert r.status_code == 200 and r.json()["deleted"] is False, r.text
    monkeypatch.undo()
    assert hidden.get("PUB1").corpus == "secret"


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


# -- 6. every error is JSON with a fitting status -------------------------------------------------

@pytest.fixture
def open_server(kb: KnowledgeBase) -> Iterator[TestClient]:
    kb.add("public notes about the launch", id="PUB1", corpus="pub")
    # raise_server_exceptions=False: a 500 is what a client would see, not a test crash
    with TestClient(web_app(kb, token=TOKEN), base_url=BASE, raise_server_exceptions=False) as c:
        yield c


def _nested(depth: int, leaf: str = "1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


HOSTILE_BODIES = [
    ("POST", "/api/search", "[" * 100_000),
    ("POST", "/api/items", "[" * 100_000),
    ("POST", "/api/search", '{"query": "x", "filters": {"metadata": ' + _nested(5_000) + "}}"),
    ("POST", "/api/search", '{"query": "x", "limit": ' + "9" * 5_000 + "}"),
    ("POST", "/api/search", '{"query": "x", "limit": 1e999}'),
    ("POST", "/api/search", '{"query": "x", "limit": NaN}'),
    ("POST", "/api/search", '{"query": "x", "filters": [1]}'),
    ("POST", "/api/search", '{"query": "x", "filters": "kind"}'),
    ("POST", "/api/search", '{"query": "x", "corpora": [1, {}]}'),
    ("POST", "/api/search", '{"query": "x", "kinds": "decision"}'),
    ("POST", "/api/search", '{"query": "x", "offset": -1}'),
    ("POST", "/api/search", '{"query": "x", "offset": -1, "facets": true}'),
    ("POST", "/api/search", '{"query": "x", "offset": "2", "facets": true}'),
    ("POST", "/api/search", '{"query": "x", "offset": 1.5, "facets": true}'),
    ("POST", "/api/search", '{"query": 5}'),
    ("POST", "/api/remember", '{"text": "x", "metadata": ' + _nested(50_000) + "}"),
    ("POST", "/api/remember", '{"text": "x", "metadata": [1]}'),
    ("POST", "/api/remember", '{"text": "x", "ttl": "soon"}'),
    ("POST", "/api/items", '{"text": "x", "metadata": {"n": ' + "1" * 5_000 + "}}"),
    ("POST", "/api/items", '{"text": "x", "title": 5}'),
    ("POST", "/api/items", '{"text": "x", "id": 5}'),
    ("POST", "/api/items", "\xff\xfe"),
]


@pytest.mark.parametrize("method, path, body", HOSTILE_BODIES,
                         ids=[f"{m} {p} {b[:24]!r}" for m, p, b in HOSTILE_BODIES])
def test_hostile_body_is_a_json_400(open_server: TestClient, kb: KnowledgeBase, method: str,
                                    path: str, body: str) -> None:
    before = kb.count()
    r = open_server.request(method, path, content=body.encode("utf-8", "surrogateescape"),
                            headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == "invalid_input" and r.json()["error"]["message"]
    assert kb.count() == before


@pytest.mark.parametrize("params", [
    {"q": "x", "filters": '{"metadata": ' + _nested(2_000) + "}"},  # URLs stay under 64 KB
    {"q": "x", "filters": "[" * 20_000},
    {"q": "x", "filters": "[1]"},
    {"q": "x", "filters": '{"metadata": {"n": ' + "1" * 5_000 + "}}"},
    {"q": "x", "limit": "9" * 5_000},
    {"q": "x", "offset": "-5"},
], ids=["deep filters", "brackets", "a list", "long number", "long limit", "negative offset"])
def test_hostile_query_string_is_a_json_400(open_server: TestClient, params: dict[str, str]) -> None:
    r = open_server.get("/api/search", params=params, headers=AUTH)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["type"] == "invalid_input"


def test_oversized_body_is_a_json_413(open_server: TestClient, kb: KnowledgeBase) -> None:
    body = b'{"text": "' + b"x" * (4 * 1024 * 1024) + b'"}'
    r = open_server.post("/api/items", content=body, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "too_large"
    chunks = iter([b'{"text": "', b"y" * (3 * 1024 * 1024), b"y" * (2 * 1024 * 1024), b'"}'])
    r = open_server.post("/api/items", content=chunks, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "too_large"
    assert kb.count() == 1


def test_unknown_route_and_method_are_json(open_server: TestClient) -> None:
    r = open_server.get("/api/nothing-here", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = open_server.put("/api/items", json={"text": "x"}, headers=AUTH)
    assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed"


# -- 7. the REST schema is strict -----------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("access_count", 1_000_000_000), ("created_at", 253402300000), ("updated_at", 0),
    ("last_accessed_at", 0), ("expires_at", 253402300000), ("vector", [0.5] * 64),
    ("embed", "sync"), ("stale", True),
])
def test_internal_item_fields_are_refused_by_name(open_server: TestClient, kb: KnowledgeBase,
                                                  field: str, value: Any) -> None:
    r = open_server.post("/api/items", json={"text": "spam alpha", field: value}, headers=AUTH)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]
    assert kb.count() == 1


def test_search_query_string_refuses_unknown_parameters(open_server: TestClient) -> None:
    r = open_server.get("/api/search", params={"q": "x", "colour": "red", "depth": "4"}, headers=AUTH)
    assert r.status_code == 400
    assert "colour" in r.json()["error"]["message"] and "depth" in r.json()["error"]["message"]


def test_every_body_refuses_unknown_fields(open_server: TestClient, kb: KnowledgeBase) -> None:
    for path, body in (("/api/items", {"text": "x", "colour": "red", "access_count": 3}),
                       ("/api/remember", {"text": "x", "colour": "red", "stale": True}),
                       ("/api/search", {"query": "x", "colour": "red", "depth": 3})):
        r = open_server.post(path, json=body, headers=AUTH)
        assert r.status_code == 400, (path, r.text)
        message = r.json()["error"]["message"]
        assert "colour" in message and all(k in message for k in body if k not in
                                           ("text", "query"))
    assert kb.count() == 1


# -- 9. Host headers that only start like a loopback name --------------------------------------------

@pytest.mark.parametrize("host", ["[::1]evil.com", "[::1]evil.com:8765", "127.0.0.1:8765@evil.com",
                                  "localhost:http", "localhost.evil.com", "[::1", "127.0.0.1:",
                                  "127.0.0.1 evil.com", ""])
def test_host_that_is_not_a_loopback_name_and_port_is_refused(open_server: TestClient,
                                                                host: str) -> None:
    r = open_server.get("/api/stats", headers={**AUTH, "host": host})
    assert r.status_code == 421, (host, r.text)
    assert r.json()["error"]["type"] == "bad_host"


@pytest.mark.parametrize("host", ["[::1]:8765", "[::1]", "localhost", "127.0.0.1:8765", "LOCALHOST:1"])
def test_loopback_hosts_are_accepted(open_server: TestClient, host: str) -> None:
    assert open_server.get("/api/stats", headers={**AUTH, "host": host}).status_code == 200


@pytest.mark.parametrize("host", ["[::1]evil.com", "127.0.0.1:8765@evil.com", "localhost:http"])
def test_mcp_transport_refuses_the_same_hosts(hidden: KnowledgeBase, host: str) -> None:
    from hybridkb.mcp.http import http_app

    client = TestClient(http_app(build_server(hidden), token=TOKEN), base_url=BASE)
    r = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={**AUTH, "host": host, "accept": "application/json, text/event-stream"})
    assert r.status_code == 421, r.text


# -- 8. merge="rrf" over many corpora; corpus creation through the API --------------------------------

def _counting(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each retrieval of the real backend runs."""
    calls = {"text_search": 0, "vector_search": 0, "substring_search": 0}
    for name in calls:
        real = getattr(kb.backend, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(kb.backend, name, counted)
    return calls


def test_rrf_merge_costs_one_retrieval_per_retriever_over_many_corpora(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb.pipeline import RRF_APART_MAX

    n = RRF_APART_MAX + 12
    kb.add_many([{"text": f"cache invalidation note {i}", "corpus": "big"} for i in range(40)])
    kb.add_many([{"text": f"cache invalidation in part {i}", "corpus": f"c{i:02d}", "id": f"c{i:02d}"}
                 for i in range(n)])
    kb.search("anything")  # the store's noise floor is measured once (noise.py), not per search
    calls = _counting(kb, monkeypatch)
    result = kb.search("cache invalidation", limit=n + 1, merge="rrf")
    assert calls == {"text_search": 1, "vector_search": 1, "substring_search": 0}
    corpora = [h.corpus for h in result.hits]
    assert set(corpora) == {"big", *(f"c{i:02d}" for i in range(n))}  # each corpus has its say
    assert corpora.count("big") == 1


def test_rrf_substring_fallback_is_one_retrieval_too(
        fts_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb.pipeline import RRF_APART_MAX

    fts_kb.add_many([{"text": f"xylophone{i}", "corpus": f"c{i:02d}"} for i in range(RRF_APART_MAX + 4)])
    calls = _counting(fts_kb, monkeypatch)
    result = fts_kb.search("xylophone", merge="rrf")  # no word matches: substrings answer
    assert result.answered_by == "substring" and len(result.hits) == 10
    assert calls == {"text_search": 1, "vector_search": 0, "substring_search": 1}


def test_rrf_merge_over_few_corpora_still_searches_each_apart(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    kb.add_many([{"text": f"cache invalidation note {i}", "corpus": "big"} for i in range(40)])
    kb.add("cache invalidation in the code", corpus="code", id="c")
    calls = _counting(kb, monkeypatch)
    result = kb.search("cache invalidation", limit=5, merge="rrf")
    assert calls["text_search"] == 2 and {h.corpus for h in result.hits[:2]} == {"big", "code"}


def test_clients_create_a_bounded_number_of_corpora(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb import selection

    monkeypatch.setattr(selection, "MAX_CLIENT_CORPORA", 3)
    kb.add("one", corpus="a")
    with TestClient(web_app(kb, token=TOKEN), base_url=BASE) as c:
        for name in ("b", "c"):
            assert c.post("/api/items", json={"text": "x", "corpus": name}, headers=AUTH).status_code == 201
        r = c.post("/api/items", json={"text": "x", "corpus": "d"}, headers=AUTH)
        assert r.status_code == 400 and "3 corpora" in r.json()["error"]["message"]
        r = c.post("/api/remember", json={"text": "x", "corpus": "e"}, headers=AUTH)
        assert r.status_code == 400
        # existing corpora stay writable
        assert c.post("/api/items", json={"text": "y", "corpus": "a"}, headers=AUTH).status_code == 201
    assert sorted(kb.corpora()) == ["a", "b", "c"]


@pytest.mark.anyio
async def test_mcp_clients_create_a_bounded_number_of_corpora(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridkb import selection

    monkeypatch.setattr(selection, "MAX_CLIENT_CORPORA", 2)
    kb.add("one", corpus="a")
    async with Client(build_server(kb)) as client:
        made = await client.call_tool("remember", {"text": "x", "corpus": "b"})
        refused = await client.call_tool("remember", {"text": "x", "corpus": "c"})
        again = await client.call_tool("remember", {"text": "y", "corpus": "a"})
    assert not made.is_error and refused.is_error and not again.is_error
    assert "2 corpora" in refused.content[0].text  # type: ignore[union-attr]
    assert sorted(kb.corpora()) == ["a", "b"]
