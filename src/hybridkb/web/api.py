"""The REST API: JSON endpoints under /api, each a thin call into `Service`.

Errors have one shape, `{"error": {"type", "message"}}`: bad input 400, read-only
403, not found 404, a store embedded with another model 409, anything else the
store refuses 500. The OpenAPI description is served at /api/openapi.json.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import (
    BackendUnavailableError,
    EmbedderMismatchError,
    HybridKBError,
    InvalidInputError,
    NotFoundError,
)
from . import jsonbody
from .auth import error
from .openapi import ITEM_FIELDS, REMEMBER_FIELDS, SEARCH_FIELDS, SEARCH_PARAMS, openapi_document
from .service import ReadOnlyError, Service

MAX_BODY_BYTES = 4 * 1024 * 1024

Endpoint = Callable[[Request], Awaitable[Response]]


def error_response(exc: HybridKBError) -> JSONResponse:
    """The one place a library error becomes an HTTP status."""
    if isinstance(exc, TooLargeError):
        return error(413, "too_large", str(exc))
    if isinstance(exc, ReadOnlyError):
        return error(403, "read_only", str(exc))
    if isinstance(exc, InvalidInputError):
        return error(400, "invalid_input", str(exc))
    if isinstance(exc, NotFoundError):
        return error(404, "not_found", str(exc))
    if isinstance(exc, EmbedderMismatchError):
        return error(409, "embedder_mismatch", str(exc))
    if isinstance(exc, BackendUnavailableError):
        return error(503, "backend_unavailable", str(exc))
    return error(500, "store_error", str(exc))


async def _call(fn: Callable[..., dict[str, Any]], *args: Any, status: int = 200,
                **kwargs: Any) -> Response:
    try:
        data = await run_in_threadpool(fn, *args, **kwargs)
    except HybridKBError as exc:
        return error_response(exc)
    return JSONResponse(data, status_code=status)


class TooLargeError(InvalidInputError):
    """A request body over MAX_BODY_BYTES (413)."""


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, bounded (jsonbody); anything else is InvalidInputError."""
    size = request.headers.get("content-length")
    too_big = TooLargeError(f"request body over {MAX_BODY_BYTES} bytes")
    if size is not None and size.isdigit() and int(size) > MAX_BODY_BYTES:
        raise too_big
    chunks, total = [], 0
    async for chunk in request.stream():  # stop reading at the limit, whatever the client claims
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise too_big
        chunks.append(chunk)
    value = await run_in_threadpool(jsonbody.parse, b"".join(chunks))
    if not isinstance(value, dict):
        raise InvalidInputError("the body must be a JSON object")
    return value


def strict(body: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """`body` when it names only `allowed` fields (the route's OpenAPI schema), else a 400
    naming the others: internal fields (access_count, created_at, vector...) included."""
    unknown = set(body) - allowed
    if unknown:
        raise InvalidInputError(f"unknown field(s): {', '.join(sorted(unknown))}; this body takes "
                                f"{', '.join(sorted(allowed))}")
    return body


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidInputError(f"{name} must be an integer, not {raw!r:.40}") from exc


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes", "on")


def search_args(request: Request) -> dict[str, Any]:
    """GET /api/search's query string as Service.search arguments."""
    params = request.query_params
    unknown = set(params.keys()) - SEARCH_PARAMS
    if unknown:
        raise InvalidInputError(f"unknown parameter(s): {', '.join(sorted(unknown))}; search takes "
                                f"{', '.join(sorted(SEARCH_PARAMS))}")
    filters = params.get("filters")
    parsed = jsonbody.parse(filters, "filters") if filters else None
    return {
        "query": params.get("q", ""),
        "corpora": [c for c in params.getlist("corpus") if c] or None,
        "kinds": [k for k in params.getlist("kind") if k] or None,
        "languages": [k for k in params.getlist("language") if k] or None,
        "path": params.get("path") or None,
        "filters": parsed,
        "mode": params.get("mode") or "hybrid",
        "fusion": params.get("fusion") or None,
        "limit": _int(request, "limit", 10),
        "offset": _int(request, "offset", 0),
        "with_text": _flag(request, "text"),
        "facets": _flag(request, "facets"),
    }




_HTTP_KINDS = {404: "not_found", 405: "method_not_allowed"}


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no such route, wrong method) in the API's JSON shape."""
    assert isinstance(exc, HTTPException)
    response = error(exc.status_code, _HTTP_KINDS.get(exc.status_code, "http_error"),
                     str(exc.detail))
    response.headers.update(exc.headers or {})
    return response


async def server_error(request: Request, exc: Exception) -> Response:
    """Anything unforeseen: a JSON 500 that names no internals (the server logs the traceback)."""
    return error(500, "internal_error", "the server failed to answer this request; its log says why")


EXCEPTION_HANDLERS = {HTTPException: http_error, Exception: server_error}


def routes(service: Service) -> list[Route]:
    async def search(request: Request) -> Response:
        try:
            if request.method == "POST":
                body = strict(await json_body(request), SEARCH_FIELDS)
                if "corpus" in body and "corpora" in body:
                    raise InvalidInputError("give either corpus (one) or corpora (several), not both")
                corpora = [body["corpus"]] if isinstance(body.get("corpus"), str) else body.get("corpora")
                args = {"query": body.get("query"), "corpora": corpora, "kinds": body.get("kinds"),
                        "languages": body.get("languages"),
                        "path": body.get("path"), "filters": body.get("filters"),
                        "mode": body.get("mode", "hybrid"), "fusion": body.get("fusion"),
                        "limit": body.get("limit", 10), "offset": body.get("offset", 0),
                        "with_text": body.get("text", False) is True,
                        "facets": body.get("facets", False) is True}
            else:
                args = search_args(request)
        except HybridKBError as exc:
            return error_response(exc)
        return await _call(service.search, **args)

    async def get_item(request: Request) -> Response:
        try:
            context = _int(request, "context", 0)
        except HybridKBError as exc:
            return error_response(exc)
        return await _call(service.get, request.path_params["item_id"], context=context)

    async def delete_item(request: Request) -> Response:
        return await _call(service.delete, request.path_params["item_id"])

    async def create(request: Request, make: Callable[[Any], Any],
                     allowed: frozenset[str]) -> Response:
        """POST bodies that create an item: a bad body is a 4xx, the item a 201."""
        try:
            body = strict(await json_body(request), allowed)
        except HybridKBError as exc:
            return error_response(exc)
        return await _call(make, body, status=201)

    async def add_item(request: Request) -> Response:
        return await create(request, service.add, ITEM_FIELDS)

    async def remember(request: Request) -> Response:
        return await create(request, service.remember, REMEMBER_FIELDS)

    async def stats(request: Request) -> Response:
        return await _call(service.stats)

    async def corpora(request: Request) -> Response:
        return await _call(service.corpora)

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(read_only=service.read_only))

    return [
        Route("/api/search", search, methods=["GET", "POST"]),
        Route("/api/items", add_item, methods=["POST"]),
        Route("/api/items/{item_id:path}", get_item, methods=["GET"]),
        Route("/api/items/{item_id:path}", delete_item, methods=["DELETE"]),
        Route("/api/remember", remember, methods=["POST"]),
        Route("/api/stats", stats, methods=["GET"]),
        Route("/api/corpora", corpora, methods=["GET"]),
        Route("/api/openapi.json", openapi, methods=["GET"]),
    ]
