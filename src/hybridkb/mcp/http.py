"""The streamable-HTTP transport: who may bind where, the bearer token, the ASGI app.

Request hygiene below the token check comes from the MCP SDK's transport: on a
loopback host it rejects requests whose Host or Origin header names another host
(DNS-rebinding protection), and it caps request bodies at the SDK's default size.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from ..errors import InvalidInputError

DEFAULT_HTTP_PORT = 8765

AsgiScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[AsgiScope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_http_binding(host: str, token: str | None) -> tuple[str, bool]:
    """The bearer token to require and whether it was generated.

    A non-loopback address without a token is refused; on loopback a random
    token is generated for this run (the caller shows it on stderr).
    """
    if token:
        return token, False
    if not is_loopback(host):
        raise InvalidInputError(
            f"refusing to serve on non-loopback address {host!r} without a bearer token; "
            "pass --token or set HYBRIDKB_TOKEN")
    return secrets.token_urlsafe(32), True


class BearerTokenMiddleware:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401.

    The check runs before the wrapped app sees the request, so nothing is touched.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise InvalidInputError("a bearer token must not be empty")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps({"error": "missing or wrong bearer token"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="hybridkb"'),
                    (b"content-length", str(len(body)).encode()),
                ]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer[Any], *, token: str, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable-HTTP ASGI app at /mcp, behind the bearer-token check."""
    inner: ASGIApp = server.streamable_http_app(host=host)
    return BearerTokenMiddleware(inner, token)


def serve_http(server: MCPServer[Any], *, host: str, port: int, token: str) -> None:
    """Run uvicorn on the app until interrupted (logging is the caller's)."""
    import uvicorn

    app = http_app(server, token=token, host=host)
    # log_config=None: uvicorn's default config sends access logs to stdout.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
