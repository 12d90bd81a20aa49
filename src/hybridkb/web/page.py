"""The search page at / and the item pages at /items/ID: static shells whose scripts read the
JSON twins (/api/search, /api/items/ID) with the bearer token (see `auth`), so no page
holds stored data; as Datasette's pages are thin over their JSON.

No front-end build step: the pages, scripts, style and icon are package data. The scripts
put stored text only into DOM text nodes (static/render.js builds them, a safe Markdown
subset included); the Content-Security-Policy lets only this origin's script run, so
stored text cannot inject markup or script.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .auth import COOKIE
from .service import Service

_STATIC_TYPES = {"app.js": "text/javascript", "item.js": "text/javascript",
                 "render.js": "text/javascript", "style.css": "text/css",
                 "favicon.svg": "image/svg+xml"}
# Only this origin's own files; no inline script, no framing, no address leaking onward.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}
# Package files: a new version's show at once (revalidated), never sniffed as another type.
_STATIC_HEADERS = {"x-content-type-options": "nosniff", "cache-control": "no-cache"}


def _package_text(*parts: str) -> str:
    return (resources.files("hybridkb.web").joinpath(*parts)).read_text("utf-8")


def _shell(request: Request, *parts: str) -> Response:
    response = HTMLResponse(_package_text(*parts), headers=SECURITY_HEADERS)
    if COOKIE in request.cookies:  # an earlier version's token cookie: no use, and it leaks
        response.delete_cookie(COOKIE, path="/")
    return response


def routes(service: Service) -> list[Route]:
    async def index(request: Request) -> Response:
        return _shell(request, "static", "index.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC_TYPES:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(_package_text("static", name), media_type=_STATIC_TYPES[name],
                        headers=_STATIC_HEADERS)

    async def favicon(request: Request) -> Response:
        return Response(_package_text("static", "favicon.svg"), media_type="image/svg+xml",
                        headers=_STATIC_HEADERS)

    async def item(request: Request) -> Response:
        return _shell(request, "static", "item.html")

    return [
        Route("/", index, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/items/{item_id:path}", item, methods=["GET"]),
    ]
