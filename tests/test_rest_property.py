"""Property-based: requests generated from the REST API's own OpenAPI document (schemathesis),
valid ones and deliberately invalid ones, sent to the real app over a real store on both
backends. None may get a 5xx; every error is the API's JSON error shape.

A bounded number of examples per operation by default; `--slow` runs ten times as many.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from hybridkb import KnowledgeBase

pytest.importorskip("starlette")
pytest.importorskip("schemathesis", reason="schemathesis is in the test extra")

import schemathesis
from schemathesis import GenerationMode

from hybridkb.web import web_app
from hybridkb.web.openapi import openapi_document

TOKEN = "property-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = "http://127.0.0.1:8765"
EXAMPLES = {"sqlite": 12, "postgres": 4}  # per operation and mode; x10 with --slow


@pytest.fixture
def schema(kb: KnowledgeBase) -> Iterator[Any]:
    kb.add("Use SQLite for local storage", id="a1", corpus="wiki", kind="decision",
           metadata={"path": "docs/storage.md", "start_line": 3})
    kb.add("def connect(path): return sqlite3.connect(path)", id="b1", corpus="code")
    loaded = schemathesis.openapi.from_dict(openapi_document())
    loaded.app = web_app(kb, token=TOKEN)
    yield loaded


def _operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


def test_openapi_document_lists_every_route(schema: Any) -> None:
    labels = {op.label for op in _operations(schema)}
    assert labels == {"GET /api/search", "POST /api/search", "GET /api/items/{item_id}",
                      "DELETE /api/items/{item_id}", "POST /api/items", "POST /api/remember",
                      "GET /api/stats", "GET /api/corpora", "GET /api/openapi.json"}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["valid", "invalid"])
def test_no_generated_request_gets_a_server_error(schema: Any, target: str, mode: GenerationMode,
                                                  request: pytest.FixtureRequest) -> None:
    backend = "postgres" if target.startswith("postgresql://") else "sqlite"
    count = EXAMPLES[backend] * (10 if request.config.getoption("--slow") else 1)
    failures: list[str] = []
    for op in _operations(schema):

        @settings(max_examples=count, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(op.as_strategy(generation_mode=mode))
        def check(case: Any) -> None:
            response = case.call(headers=AUTH, base_url=BASE)
            shown = f"{case.method} {case.formatted_path} query={case.query!r:.200} " \
                    f"body={case.body!r:.300} -> {response.status_code} {response.text[:300]}"
            if response.status_code >= 500:
                failures.append(shown)
                return
            if response.status_code >= 400:
                assert response.headers.get("content-type", [""])[0].startswith("application/json"), shown
                error = json.loads(response.text)["error"]
                assert isinstance(error["type"], str) and isinstance(error["message"], str), shown

        check()
    assert not failures, "\n".join(failures[:10])
