"""One HTTP server for everyone: MCP at /mcp, the REST API at /api, the search page at /.

MCP keeps its own transport (bearer header, the SDK's Host/Origin checks); the
page and the API sit behind `TokenGate` with the same token and loopback rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette

from ..mcp.http import is_loopback
from ..store import KnowledgeBase
from . import api, page
from .auth import ASGIApp, AsgiScope, Receive, Send, TokenGate
from .service import Service


def web_app(kb: KnowledgeBase, *, token: str, host: str = "127.0.0.1", read_only: bool = False,
            corpora: Sequence[str] | None = None) -> ASGIApp:
    """The page and the REST API over `kb`, behind the token (no MCP)."""
    service = Service(kb, read_only=read_only, corpora=corpora)
    app = Starlette(routes=[*api.routes(service), *page.routes(service)],
                    exception_handlers=api.EXCEPTION_HANDLERS)
    return TokenGate(app, token, loopback=is_loopback(host))


class PathSwitch:
    """ASGI: /mcp goes to the MCP app (which also owns the lifespan), everything else to the web app."""

    def __init__(self, mcp: ASGIApp, web: ASGIApp) -> None:
        self.mcp, self.web = mcp, web

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "lifespan" or path == "/mcp" or path.startswith("/mcp/"):
            await self.mcp(scope, receive, send)
        else:
            await self.web(scope, receive, send)


def combined_app(kb: KnowledgeBase, mcp_app: ASGIApp, *, token: str, host: str = "127.0.0.1",
                 read_only: bool = False, corpora: Sequence[str] | None = None) -> ASGIApp:
    """`mcp_app` (already behind its bearer check) beside the page and the REST API."""
    return PathSwitch(mcp_app, web_app(kb, token=token, host=host, read_only=read_only,
                                       corpora=corpora))


def run(app: ASGIApp, *, host: str, port: int) -> None:
    """Serve `app` with uvicorn until interrupted; logs to stderr only."""
    import anyio
    import uvicorn

    # log_config=None: uvicorn's default config sends access logs to stdout.
    config: Any = uvicorn.Config(app, host=host, port=port, log_config=None, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
