"""Who may use the page and the REST API: the serve token, and the loopback Host/Origin rules.

A program sends `Authorization: Bearer <token>`. A person opens the URL that
`hybridkb serve --http` prints, `http://127.0.0.1:PORT/?token=...`, once: the
token becomes an HttpOnly, SameSite=Strict cookie and the address bar loses it.
On a loopback bind, requests whose Host names another host are refused (DNS
rebinding), and a cross-site Origin is refused everywhere.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..mcp.http import LOOPBACK_HOSTS, host_name

COOKIE = "hybridkb_token"

AsgiScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[AsgiScope, Receive, Send], Awaitable[None]]

_LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>hybridkb: token needed</title></head>
<body style="font-family:sans-serif;max-width:40em;margin:3em auto">
<h1>hybridkb</h1><p>This page needs the token of this server. Open the address that
<code>hybridkb serve --http</code> printed (it ends in <code>?token=…</code>), or add
<code>?token=YOUR_TOKEN</code> to this address once.</p></body></html>"""


def error(status: int, kind: str, message: str) -> JSONResponse:
    """The one JSON error shape of the REST API."""
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)


class TokenGate:
    """ASGI middleware in front of the page and the API: Host/Origin rules, then the token."""

    def __init__(self, app: ASGIApp, token: str, *, loopback: bool) -> None:
        if not token:
            raise ValueError("a token must not be empty")
        self.app, self.loopback = app, loopback
        self._token = token.encode()

    def _valid(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def _refusal(self, request: Request) -> Response | None:
        host = request.headers.get("host", "")
        if self.loopback and host_name(host) not in LOOPBACK_HOSTS:
            return error(421, "bad_host", f"this server answers only for loopback hosts, not {host!r}")
        origin = request.headers.get("origin")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return error(403, "bad_origin", f"cross-site request from {origin!r} refused")
        return None

    def _authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if header.startswith("Bearer ") and self._valid(header[len("Bearer "):]):
            return True
        return self._valid(request.cookies.get(COOKIE))

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._refusal(request)
        if response is None and "token" in request.query_params and request.method == "GET":
            response = self._login(request)
        if response is None and not self._authorized(request):
            if request.url.path.startswith("/api/"):
                response = error(401, "unauthorized", "missing or wrong token: send "
                                 "`Authorization: Bearer <token>` (printed by `hybridkb serve --http`)")
                response.headers["www-authenticate"] = 'Bearer realm="hybridkb"'
            else:
                response = HTMLResponse(_LOGIN_PAGE, status_code=401)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _login(self, request: Request) -> Response:
        """`?token=` once: set the cookie and send the browser to the same URL without it."""
        if not self._valid(request.query_params.get("token")):
            return HTMLResponse(_LOGIN_PAGE, status_code=401)
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = URL(path=request.url.path, query=urlencode(rest))
        response = RedirectResponse(str(target), status_code=303)
        response.set_cookie(COOKIE, self._token.decode(), httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        response.headers["cache-control"] = "no-store"
        return response
