"""The HTTP faces beside MCP: a REST API (/api, described at /api/openapi.json) and a search page (/).

    app = web_app(hybridkb.open("kb.db"), token="...")     # any ASGI server
    `hybridkb serve --http` serves it with MCP at /mcp.
"""

from __future__ import annotations

from .app import combined_app, run, web_app
from .service import Service

__all__ = ["Service", "combined_app", "run", "web_app"]
