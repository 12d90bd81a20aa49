"""Every CLI command, MCP tool and REST endpoint is documented (README.md or docs/*.md); commands have help."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import click
import pytest

import hybridkb
from hybridkb.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def docs_text() -> str:
    return "\n".join(p.read_text("utf-8") for p in DOCS)


def cli_commands() -> dict[str, click.Command]:
    assert isinstance(cli, click.Group)
    return dict(cli.commands)


def shown_as_command(name: str, text: str) -> bool:
    """`hybridkb [global options] NAME` somewhere in the docs, as a user would type it."""
    return re.search(rf"\bhybridkb(?:\s+--?[\w-]+(?:[ =][^\s-]\S*)?)*\s+{re.escape(name)}\b", text) \
        is not None


def mcp_tool_names() -> set[str]:
    pytest.importorskip("mcp.server.mcpserver")
    from hybridkb.mcp import build_server

    kb = hybridkb.open(":memory:", embedder=None)
    try:
        server = build_server(kb)  # the full server: read-only mode only drops tools
        return {tool.name for tool in anyio.run(server.list_tools)}
    finally:
        kb.close()


def test_the_cli_has_its_known_commands() -> None:
    assert {"search", "add", "serve", "export", "migrate", "index", "eval"} <= set(cli_commands())


@pytest.mark.parametrize("name", sorted(cli_commands()))
def test_cli_command_is_documented(name: str) -> None:
    assert shown_as_command(name, docs_text()), \
        f"`hybridkb {name}` appears nowhere in README.md or docs/*.md"


@pytest.mark.parametrize("name", sorted(cli_commands()))
def test_cli_command_has_help(name: str) -> None:
    command = cli_commands()[name]
    assert (command.help or "").strip(), f"`hybridkb {name}` has no help text"


def test_mcp_tools_are_documented_in_the_tools_table() -> None:
    names = mcp_tool_names()
    assert names == {"search", "recall", "get", "list_corpora", "remember", "forget"}
    text = docs_text()
    missing = [n for n in sorted(names) if not re.search(rf"^\|\s*`{n}`\s*\|", text, re.MULTILINE)]
    assert not missing, f"MCP tools without a row in a docs table: {missing}"


def test_the_matchers_can_fail() -> None:
    assert shown_as_command("search", "run `hybridkb --json search x`")
    assert shown_as_command("demo", "hybridkb --db demo.db demo")
    assert not shown_as_command("purge", "hybridkb search purge-me")
    assert not shown_as_command("frobnicate", docs_text())


def rest_endpoints() -> set[str]:
    """"METHOD /api/path" for every operation the OpenAPI description (and so the server) has."""
    pytest.importorskip("starlette")
    from hybridkb.web.openapi import openapi_document

    return {f"{method.upper()} {path}" for path, ops in openapi_document()["paths"].items()
            for method in ops}


def test_rest_endpoints_are_documented_in_the_endpoints_table() -> None:
    endpoints = rest_endpoints()
    assert {"GET /api/search", "POST /api/items", "DELETE /api/items/{item_id}"} <= endpoints
    text = docs_text()

    def has_row(endpoint: str, text: str) -> bool:
        return re.search(rf"^\|\s*`{re.escape(endpoint)}`\s*\|", text, re.MULTILINE) is not None

    assert has_row("GET /api/x", "| `GET /api/x` | a |") and not has_row("GET /api/x", "see `GET /api/x`")
    missing = [e for e in sorted(endpoints) if not has_row(e, text)]
    assert not missing, f"REST endpoints without a row in a docs table: {missing}"


def test_the_rest_description_matches_the_routes() -> None:
    """The documented set is the served set: every OpenAPI operation is a route, and back."""
    pytest.importorskip("starlette")
    from starlette.routing import Route

    from hybridkb.web import api
    from hybridkb.web.service import Service

    kb = hybridkb.open(":memory:", embedder=None)
    try:
        served = {f"{m} {r.path.replace(':path', '')}" for r in api.routes(Service(kb))
                  if isinstance(r, Route) for m in (r.methods or ()) if m != "HEAD"}
    finally:
        kb.close()
    assert served == rest_endpoints()
