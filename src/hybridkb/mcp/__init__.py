"""MCP tools over the same KnowledgeBase the CLI and the Python API use.

    server = build_server(hybridkb.open("kb.db"), read_only=False, corpora=None)
    run_stdio(server)                        # what MCP client configs launch
    run_http(server, host="127.0.0.1", port=8765, token="...")

`schemas` holds what tools return, `tools` the tool bodies, `http` the HTTP
transport (bearer token), `server` the assembly. Needs `pip install 'hybridkb[mcp]'`.
"""

from __future__ import annotations

from ..snippets import snippet
from .http import BearerTokenMiddleware, check_http_binding, http_app, is_loopback
from .server import SERVER_NAME, build_server, run_http, run_stdio

__all__ = [
    "SERVER_NAME", "BearerTokenMiddleware", "build_server", "check_http_binding", "http_app",
    "is_loopback", "run_http", "run_stdio", "snippet",
]
