"""Deprecated: the MCP server moved to the `hybridkb.mcp` package; this alias goes in the next release."""

from __future__ import annotations

import warnings

from .mcp import (
    SERVER_NAME,
    BearerTokenMiddleware,
    build_server,
    check_http_binding,
    http_app,
    is_loopback,
    run_http,
    run_stdio,
    snippet,
)

__all__ = [
    "SERVER_NAME", "BearerTokenMiddleware", "build_server", "check_http_binding", "http_app",
    "is_loopback", "run_http", "run_stdio", "snippet",
]

warnings.warn("hybridkb.mcp_server is deprecated; import from hybridkb.mcp instead",
              DeprecationWarning, stacklevel=2)
