"""The search page at / (a static page that calls /api/search) and a server-rendered page per item.

No front-end build step: the page, its script and its style are package data.
Every stored value reaches HTML through `html.escape`.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from string import Template
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ..errors import HybridKBError, NotFoundError
from .service import Service

_STATIC_TYPES = {"app.js": "text/javascript", "style.css": "text/css"}
_FIELDS = ("id", "corpus", "kind", "scope", "repo", "namespace", "source_url", "created_at",
           "updated_at", "expires_at", "access_count")


def _package_text(*parts: str) -> str:
    return (resources.files("hybridkb.web").joinpath(*parts)).read_text("utf-8")


def render_item(data: dict[str, object]) -> str:
    """The HTML page of one item (as `Service.get` returns it)."""
    esc = html.escape
    rows = [f"<dt>{esc(k)}</dt><dd>{esc(str(data[k]))}</dd>" for k in _FIELDS
            if data.get(k) not in (None, "", {})]
    metadata = data.get("metadata")
    if metadata:
        rows.append(f"<dt>metadata</dt><dd><code>{esc(json.dumps(metadata, ensure_ascii=False))}"
                    "</code></dd>")
    item_id = str(data["id"])
    label = str(data.get("source") or "")
    location = data.get("location")
    return Template(_package_text("templates", "item.html")).substitute(
        title=esc(str(data.get("title") or item_id)), source=esc(label),
        location=f'<span class="loc">{esc(str(location))}</span>' if location else "",
        fields="".join(rows), text=esc(str(data["text"])), quoted_id=esc(quote(item_id, safe="")))


def routes(service: Service) -> list[Route]:
    async def index(request: Request) -> Response:
        return HTMLResponse(_package_text("static", "index.html"))

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC_TYPES:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(_package_text("static", name), media_type=_STATIC_TYPES[name])

    async def item(request: Request) -> Response:
        item_id = request.path_params["item_id"]
        try:
            data = await run_in_threadpool(service.get, item_id)
        except NotFoundError as exc:
            return HTMLResponse(f"<!doctype html><title>not found</title><p>{html.escape(str(exc))}</p>"
                                '<p><a href="/">search</a></p>', status_code=404)
        except HybridKBError as exc:
            return HTMLResponse(f"<!doctype html><p>{html.escape(str(exc))}</p>", status_code=400)
        return HTMLResponse(render_item(data))

    return [
        Route("/", index, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/items/{item_id:path}", item, methods=["GET"]),
    ]
