"""Who may use the REST API: the serve token, and the loopback Host/Origin rules.

Every /api request must send `Authorization: Bearer <token>`. The page is a set of
static shells (no stored data in them, so they are served without the token): a person
opens the URL `hybridkb serve --http` prints, `http://127.0.0.1:PORT/?token=...`, once;
the page's script moves the token into the origin's localStorage (scheme, host and
port: no other local server can read it), drops it from the address bar, and sends it
in the header on each fetch. No cookie authorizes anything: a browser sends cookies to
every port of a host, so any other local server it visits would receive one. On a
loopback bind, requests whose Host names another host are refused (DNS rebinding), and
a cross-site Origin is refused everywhere.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..mcp.http import LOOPBACK_HOSTS, host_name

COOKIE = "hybridkb_token"  # set by earlier versions: never read, cleared by the pages

AsgiScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[AsgiScope, Receive, Send], Awaitable[None]]

def error(status: int, kind: str, message: str) -> JSONResponse:
    """The one JSON error shape of the REST API."""
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)


class TokenGate:
    """ASGI middleware in front of the page and the API: Host/Origin rules everywhere, then
    the bearer token for /api (the pages are shells that fetch their data with it)."""

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
        return header.startswith("Bearer ") and self._valid(header[len("Bearer "):])

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._refusal(request)
        if response is None and request.url.path.startswith("/api/") and not self._authorized(request):
            response = error(401, "unauthorized", "missing or wrong token: send "
                             "`Authorization: Bearer <token>` (printed by `hybridkb serve --http`)")
            response.headers["www-authenticate"] = 'Bearer realm="hybridkb"'
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
