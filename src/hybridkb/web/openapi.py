"""The OpenAPI 3.1 description of the REST API, written out by hand (the API is small and stable)."""

from __future__ import annotations

from typing import Any

from ..version import package_version
from .context import MAX_AROUND
from .facets import FACET_POOL
from .service import MAX_LIMIT

_ERROR = {"$ref": "#/components/responses/Error"}
_OBJ: dict[str, Any] = {"type": "object"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_HIT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"}, "corpus": {"type": "string"},
        "title": {"type": ["string", "null"]}, "kind": {"type": ["string", "null"]},
        "score": {"type": "number", "description": "Final score after fusion and boosts."},
        "source": {"type": "string", "description": "Source label, e.g. [wiki: Page Title]."},
        "source_url": {"type": ["string", "null"]},
        "location": {"type": ["string", "null"], "description": "path:line when the item records them."},
        "snippet": {"type": "string", "description": "The best part of the text, its line breaks kept."},
        "snippet_line": {"type": ["integer", "null"],
                         "description": "The file line the snippet starts at (items from files)."},
        "highlights": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}},
                       "description": "[start, end) character spans of query terms in the snippet."},
        "found_by": {"type": "array", "items": {"type": "string"}},
        "metadata": _OBJ, "created_at": {"type": ["string", "null"]},
        "text": {"type": "string", "description": "Full text, only with text=true."},
        "explanation": {"type": "object", "properties": {
            "retrievers": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "rank": {"type": "integer"}, "score": {"type": "number"}}}},
            "fusion_score": {"type": "number"},
            "relevance": {"type": "number", "description": "The score before boosts, in [0, 1]."},
            "boosts": {"type": "object", "additionalProperties": {"type": "number"}},
            "final_score": {"type": "number"}}},
    },
}

_SEARCH_RESULT = {
    "type": "object",
    "properties": {
        "query": {"type": "string"}, "mode": {"type": "string"}, "fusion": {"type": "string"},
        "answered_by": {"type": "string", "description": "hybrid, fts, vector, substring or none."},
        "confidence": {"type": "string", "enum": ["high", "low", "none"],
                       "description": "How likely the best hit answers: none = nothing relevant found."},
        "notes": {"type": "array", "items": {"type": "string"}},
        "hits": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
        "facets": {
            "type": "object", "description": "With facets=true: counts over the first "
            f"{FACET_POOL} hits (the candidate pool) by corpus, kind, language and folder.",
            "additionalProperties": {"type": "array", "items": {"type": "object", "properties": {
                "value": {"type": "string"}, "count": {"type": "integer"}}}}},
        "facet_pool": {"type": "integer", "description": "How many hits the facets count."},
    },
}

_ITEM_IN: dict[str, Any] = {
    "type": "object", "required": ["text"], "additionalProperties": False,
    "properties": {
        "text": {"type": "string"}, "id": {"type": "string"}, "corpus": {"type": "string"},
        "title": {"type": "string"}, "kind": {"type": "string"}, "scope": {"type": "string"},
        "repo": {"type": "string"}, "namespace": {"type": "string"}, "source_url": {"type": "string"},
        "metadata": _OBJ, "ttl": {"type": "number", "description": "Expire after this many seconds."},
        "replace": {"type": "boolean", "description": "Replace an item with the same id."},
    },
}

_REMEMBER_IN: dict[str, Any] = {
    "type": "object", "required": ["text"], "additionalProperties": False,
    "properties": {
        "text": {"type": "string"}, "kind": {"type": "string"}, "scope": {"type": "string"},
        "ttl": {"type": "number", "exclusiveMinimum": 0}, "metadata": _OBJ,
        "corpus": {"type": "string"}, "title": {"type": "string"}},
}

_SEARCH_IN: dict[str, Any] = {
    "type": "object", "required": ["query"], "additionalProperties": False,
    "properties": {
        "query": {"type": "string"}, "corpus": {"type": "string"},
        "corpora": {"type": "array", "items": {"type": "string"}},
        "kinds": {"type": "array", "items": {"type": "string"}},
        "languages": {"type": "array", "items": {"type": "string"}},
        "path": {"type": "string"}, "filters": _OBJ,
        "mode": {"enum": ["hybrid", "fts", "vector"]}, "fusion": {"enum": ["rrf", "convex", "dbsf"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        "offset": {"type": "integer", "minimum": 0}, "text": {"type": "boolean"},
        "facets": {"type": "boolean", "description": "Add facet counts over the candidate pool."}},
}

# What each body may name: the REST API refuses any other field (api.strict).
ITEM_FIELDS = frozenset(_ITEM_IN["properties"])
REMEMBER_FIELDS = frozenset(_REMEMBER_IN["properties"])
SEARCH_FIELDS = frozenset(_SEARCH_IN["properties"])

_SEARCH_PARAMS: list[dict[str, Any]] = [
    {"name": "q", "in": "query", "required": True, "schema": {"type": "string"},
     "description": "The query: words, identifiers or a question."},
    {"name": "corpus", "in": "query", "schema": {"type": "array", "items": {"type": "string"}},
     "style": "form", "explode": True, "description": "Only these corpora (repeat the parameter)."},
    {"name": "kind", "in": "query", "schema": {"type": "array", "items": {"type": "string"}},
     "style": "form", "explode": True, "description": "Only items of these kinds."},
    {"name": "language", "in": "query", "schema": {"type": "array", "items": {"type": "string"}},
     "style": "form", "explode": True,
     "description": "Only items whose metadata.language is one of these (as `index` records it)."},
    {"name": "path", "in": "query", "schema": {"type": "string"},
     "description": "Only items from indexed files matching this path filter: a glob "
                    "('src/**/*.py'), a folder ('src/pkg/'), a name at any depth ('cors.py') or "
                    "an absolute path inside an indexed folder."},
    {"name": "filters", "in": "query", "schema": {"type": "string"},
     "description": "More filters as a JSON object (scope, repo, namespace, metadata, created_after...)."},
    {"name": "mode", "in": "query", "schema": {"enum": ["hybrid", "fts", "vector"]}},
    {"name": "fusion", "in": "query", "schema": {"enum": ["calibrated", "rrf", "convex", "dbsf"]}},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}},
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "text", "in": "query", "schema": {"type": "boolean"}, "description": "Include full text."},
    {"name": "facets", "in": "query", "schema": {"type": "boolean"},
     "description": f"Add facet counts over the first {FACET_POOL} hits."},
]

SEARCH_PARAMS = frozenset(p["name"] for p in _SEARCH_PARAMS)

_ID = [{"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}]


def openapi_document(*, read_only: bool = False) -> dict[str, Any]:
    """The description served at /api/openapi.json (write endpoints left out when read-only)."""
    paths: dict[str, Any] = {
        "/api/search": {
            "get": {"operationId": "search", "summary": "Hybrid search (BM25 + vectors, fused)",
                    "parameters": _SEARCH_PARAMS,
                    "responses": {"200": _json({"$ref": "#/components/schemas/SearchResult"}, "Hits"),
                                  "400": _ERROR, "401": _ERROR, "404": _ERROR}},
            "post": {"operationId": "searchPost", "summary": "Search with a JSON body",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": _SEARCH_IN}}},
                     "responses": {"200": _json({"$ref": "#/components/schemas/SearchResult"}, "Hits"),
                                   "400": _ERROR, "401": _ERROR, "404": _ERROR, "413": _ERROR}},
        },
        "/api/items/{item_id}": {
            "get": {"operationId": "getItem", "summary": "One item with its full text",
                    "parameters": [*_ID, {
                        "name": "context", "in": "query",
                        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_AROUND},
                        "description": "Add `context`: this many lines before and after the item in "
                                       "its file (read from the indexed file when unchanged, else "
                                       "pieced from its neighbouring chunks), or null."}],
                    "responses": {"200": _json(_OBJ, "The item"), "401": _ERROR, "404": _ERROR}},
        },
        "/api/stats": {"get": {"operationId": "stats", "summary": "Counts, model, version",
                               "responses": {"200": _json(_OBJ, "Stats"), "401": _ERROR}}},
        "/api/corpora": {"get": {"operationId": "corpora", "summary": "Corpora and their item counts",
                                 "responses": {"200": _json(_OBJ, "Corpora"), "401": _ERROR}}},
        "/api/openapi.json": {"get": {"operationId": "openapi", "summary": "This description",
                                      "responses": {"200": _json(_OBJ, "OpenAPI 3.1")}}},
    }
    if not read_only:
        paths["/api/items"] = {"post": {
            "operationId": "addItem", "summary": "Add (or with replace, upsert) one item",
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ITEM_IN}}},
            "responses": {"201": _json(_OBJ, "{id, corpus}"), "400": _ERROR, "401": _ERROR,
                          "403": _ERROR, "404": _ERROR, "413": _ERROR}}}
        paths["/api/items/{item_id}"]["delete"] = {
            "operationId": "deleteItem", "summary": "Delete one item", "parameters": _ID,
            "responses": {"200": _json(_OBJ, "{id, deleted}"), "401": _ERROR, "403": _ERROR,
                          "404": _ERROR}}
        paths["/api/remember"] = {"post": {
            "operationId": "remember", "summary": "Store a memory (decision, lesson, note...)",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _REMEMBER_IN}}},
            "responses": {"201": _json(_OBJ, "{id, corpus, expires_at}"), "400": _ERROR,
                          "401": _ERROR, "403": _ERROR, "413": _ERROR}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "hybridkb REST API", "version": package_version(),
                 "description": "Hybrid search over a hybridkb store. Send `Authorization: Bearer "
                                "<token>` (the token `hybridkb serve --http` prints)."},
        "paths": paths,
        "components": {
            "schemas": {"Hit": _HIT, "SearchResult": _SEARCH_RESULT},
            "responses": {"Error": _json({"type": "object", "properties": {"error": {
                "type": "object", "properties": {"type": {"type": "string"},
                                                 "message": {"type": "string"}}}}},
                "An error: {error: {type, message}}")},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
