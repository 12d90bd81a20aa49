"""Server assembly and start-up: the tools registered on an MCPServer, served over stdio or HTTP."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from ..store import KnowledgeBase
from ..version import package_version
from .http import DEFAULT_HTTP_PORT, serve_http
from .schemas import DESCRIPTIONS
from .tools import Tools, tool_errors

SERVER_NAME = "hybridkb"


def build_server(kb: KnowledgeBase, read_only: bool = False,
                 corpora: Sequence[str] | None = None) -> MCPServer[Any]:
    """An MCP server over `kb`; `read_only` drops the write tools, `corpora` limits what it sees."""
    tools = Tools(kb, read_only, corpora)
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME, version=package_version(),
        instructions=(
            "hybridkb is a searchable knowledge base and memory. Use search/recall before "
            "answering from scratch; use get for full text"
            + ("." if read_only else "; use remember to keep decisions and lessons.")),
        log_level="WARNING",
    )
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(tool_errors(tools.search), description=DESCRIPTIONS["search"],
                    annotations=read)
    server.add_tool(tool_errors(tools.recall), description=DESCRIPTIONS["recall"],
                    annotations=ToolAnnotations(read_only_hint=read_only, open_world_hint=False))
    server.add_tool(tool_errors(tools.get), description=DESCRIPTIONS["get"], annotations=read)
    server.add_tool(tool_errors(tools.list_corpora), description=DESCRIPTIONS["list_corpora"],
                    annotations=read)
    if not read_only:
        server.add_tool(tool_errors(tools.remember), description=DESCRIPTIONS["remember"],
                        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                    open_world_hint=False))
        server.add_tool(tool_errors(tools.forget), description=DESCRIPTIONS["forget"],
                        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                                    idempotent_hint=True, open_world_hint=False))
    return server


def _log_to_stderr() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")


def run_stdio(server: MCPServer[Any]) -> None:
    """Serve over stdin/stdout until the client closes stdin. Logs go to stderr only."""
    _log_to_stderr()
    server.run("stdio")


def run_http(server: MCPServer[Any], *, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT,
             token: str) -> None:
    """Serve streamable HTTP at http://host:port/mcp until interrupted."""
    _log_to_stderr()
    serve_http(server, host=host, port=port, token=token)
