"""The search page at / and the item page at /items/ID: static shells whose script fetches
their data from /api with the bearer token (see `auth`), so no page holds stored data.

No front-end build step: the pages, their script and their style are package data.
The script puts stored text only into DOM text nodes; the Content-Security-Policy lets
only this origin's script run, so stored text cannot inject markup or script.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .auth import COOKIE
from .service import Service

_STATIC_TYPES = {"app.js": "text/javascript", "style.css": "text/css"}
# Only this origin's own files; no inline script, no framing, no address leaking onward.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


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
                        headers={"x-content-type-options": "nosniff"})

    async def item(request: Request) -> Response:
        return _shell(request, "templates", "item.html")

    return [
        Route("/", index, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/items/{item_id:path}", item, methods=["GET"]),
    ]
