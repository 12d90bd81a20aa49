"""The streamable-HTTP transport: who may bind where, the bearer token, the ASGI app.

Request hygiene below the token check comes from the MCP SDK's transport: on a
loopback host it rejects requests whose Host or Origin header names another host
(DNS-rebinding protection), and it caps request bodies at the SDK's default size.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from ..errors import InvalidInputError

DEFAULT_HTTP_PORT = 8765
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# A Host header: a name or a bracketed IPv6 address, then at most ":port". Anything else
# ("[::1]evil.com", "127.0.0.1:80@evil.com", "localhost:http") names no host we know.
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s\[\]:/@]+)(?::[0-9]{1,5})?")

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


def host_name(host_header: str) -> str:
    """The host part of a Host header value, lower case: "127.0.0.1:8765" -> "127.0.0.1",
    "[::1]:80" -> "[::1]"; "" for a value that is not a host and port."""
    match = _HOST.fullmatch(host_header)
    return match.group(1).lower() if match else ""


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


async def _refuse(send: Send, status: int, message: str, *extra: tuple[bytes, bytes]) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), *extra,
        (b"content-length", str(len(body)).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})


class BearerTokenMiddleware:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401;
    on a loopback bind, one whose Host is not a loopback name and port gets 421 (the SDK's
    own check takes "127.0.0.1:80@evil.com" for a port).

    The checks run before the wrapped app sees the request, so nothing is touched.
    """

    def __init__(self, app: ASGIApp, token: str, *, loopback: bool = False) -> None:
        if not token:
            raise InvalidInputError("a bearer token must not be empty")
        self.app, self.loopback = app, loopback
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            if self.loopback and host_name(host) not in LOOPBACK_HOSTS:
                await _refuse(send, 421, f"this server answers only for loopback hosts, not {host!r}")
                return
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await _refuse(send, 401, "missing or wrong bearer token",
                              (b"www-authenticate", b'Bearer realm="hybridkb"'))
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer[Any], *, token: str, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable-HTTP ASGI app at /mcp, behind the bearer-token check."""
    inner: ASGIApp = server.streamable_http_app(host=host)
    return BearerTokenMiddleware(inner, token, loopback=is_loopback(host))


def serve_http(server: MCPServer[Any], *, host: str, port: int, token: str) -> None:
    """Run uvicorn on the app until interrupted (logging is the caller's)."""
    import uvicorn

    app = http_app(server, token=token, host=host)
    # log_config=None: uvicorn's default config sends access logs to stdout.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
