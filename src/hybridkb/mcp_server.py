"""MCP tools over the same KnowledgeBase the CLI and the Python API use.

    server = build_server(hybridkb.open("kb.db"), read_only=False, corpora=None)
    run_stdio(server)                        # what MCP client configs launch
    run_http(server, host="127.0.0.1", port=8765, token="...")

Tools return structured data (compact hits first; `get` for full text) and never
print: on stdio, stdout is the protocol. Library errors become tool errors with
their message in one place (`_tool_errors`). Needs `pip install 'hybridkb[mcp]'`.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import logging
import re
import secrets
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from .errors import HybridKBError, InvalidInputError, NotFoundError
from .model import Item, SearchResult, iso
from .store import MEMORY_CORPUS, KnowledgeBase

__all__ = [
    "build_server", "check_http_binding", "run_http", "run_stdio", "snippet",
]

logger = logging.getLogger(__name__)

SERVER_NAME = "hybridkb"
SNIPPET_CHARS = 200
MAX_LIMIT = 100
MAX_GET_IDS = 100
DEFAULT_HTTP_PORT = 8765

Mode = Literal["hybrid", "fts", "vector"]


# -- snippets (pure) ----------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """A window of about `width` characters of `text` holding the most query terms.

    Whitespace is collapsed; a term matches a word that starts with it
    (case-insensitive), so "migrat" finds "migration_032". With no match the
    text's beginning is returned. "…" marks a cut at either end.
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    terms = sorted({t for t in _WORD.findall(query.lower()) if len(t) > 1 or t.isdigit()},
                   key=len, reverse=True)
    hits: list[tuple[int, str]] = []
    for match in _WORD.finditer(flat):
        word = match.group().lower()
        term = next((t for t in terms if word.startswith(t)), None)
        if term is not None:
            hits.append((match.start(), term))
            if len(hits) >= 500:
                break
    lead = width // 4
    start = 0
    if hits:
        best = (-1, -1)
        for i, (pos, _) in enumerate(hits):
            covered = [t for p, t in hits[i:] if p < pos + width - lead]
            key = (len(set(covered)), len(covered))
            if key > best:
                best, start = key, max(0, pos - lead)
    end = min(len(flat), start + width)
    start = max(0, end - width)
    if start > 0:
        space = flat.find(" ", start, start + 20)
        start = space + 1 if space != -1 else start
    if end < len(flat):
        space = flat.rfind(" ", end - 20, end)
        end = space if space != -1 else end
    return ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")


# -- structured outputs -------------------------------------------------------------------------

class HitOut(BaseModel):
    id: str = Field(description="Pass to `get` for the full text.")
    corpus: str
    title: str | None
    kind: str | None
    snippet: str = Field(description="A short window of the text around the matched terms.")
    score: float
    source: str = Field(description="Human-readable source label, e.g. [wiki: Page Title].")
    url: str | None


class SearchOut(BaseModel):
    query: str
    mode: str
    answered_by: str = Field(description=(
        "Which path produced the hits: hybrid, fts (full text only), vector, substring "
        "(last-resort fallback) or none (no path found anything)."))
    degraded: bool = Field(description=(
        "True when the full requested search could not run (e.g. no embedder: full text "
        "only). An empty degraded result does not prove that nothing relevant exists."))
    notes: list[str]
    hits: list[HitOut]


class RememberOut(BaseModel):
    id: str
    corpus: str
    expires_at: str | None


class ItemOut(BaseModel):
    id: str
    corpus: str
    title: str | None
    kind: str | None
    text: str
    scope: str | None
    repo: str | None
    namespace: str | None
    source_url: str | None
    metadata: dict[str, Any]
    created_at: str | None
    updated_at: str | None
    expires_at: str | None
    access_count: int
    last_accessed_at: str | None
    stale: bool


class GetOut(BaseModel):
    items: list[ItemOut]
    missing: list[str] = Field(description="Requested ids that do not exist (or are not visible).")


class ForgetOut(BaseModel):
    id: str
    deleted: bool


class CorpusOut(BaseModel):
    name: str
    count: int


class CorporaOut(BaseModel):
    corpora: list[CorpusOut]
    vector_search: bool = Field(description="False when searches fall back to full text only.")
    embedder: str | None
    read_only: bool


def _item_out(item: Item) -> ItemOut:
    assert item.id is not None
    return ItemOut(
        id=item.id, corpus=item.corpus, title=item.title, kind=item.kind, text=item.text,
        scope=item.scope, repo=item.repo, namespace=item.namespace, source_url=item.source_url,
        metadata=item.metadata, created_at=iso(item.created_at), updated_at=iso(item.updated_at),
        expires_at=iso(item.expires_at), access_count=item.access_count,
        last_accessed_at=iso(item.last_accessed_at), stale=item.stale,
    )


# -- error mapping and result shaping: the one place ---------------------------------------------

def _tool_errors(fn: Callable[..., BaseModel]) -> Callable[..., CallToolResult]:
    """Run a tool: HybridKBError -> a tool error carrying its message; model -> compact result.

    The SDK reads the signature (and the output schema) through `__wrapped__`.
    Anything else that escapes is logged to stderr by the SDK and reaches the
    client as a generic error, never as a traceback.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            out = fn(*args, **kwargs)
        except HybridKBError as exc:
            raise ToolError(str(exc)) from exc
        data = out.model_dump(mode="json")
        # Compact JSON for the text block: agents pay for every token.
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        content: list[ContentBlock] = [TextContent(type="text", text=text)]
        return CallToolResult(content=content, structured_content=data)

    return wrapper


# -- the tools --------------------------------------------------------------------------------

CorporaArg = Annotated[list[str] | None, Field(
    description="Only these corpora (see list_corpora); default: every corpus this server sees.")]
KindsArg = Annotated[list[str] | None, Field(
    description="Only items of these kinds, e.g. decision, lesson, wiki_page, code.")]
LimitArg = Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Maximum number of hits.")]


class _Tools:
    def __init__(self, kb: KnowledgeBase, read_only: bool, corpora: Sequence[str] | None) -> None:
        self.kb = kb
        self.read_only = read_only
        self.allowed: tuple[str, ...] | None = tuple(dict.fromkeys(corpora)) if corpora else None

    # -- corpus visibility --------------------------------------------------------------------

    def _visible(self, corpus: str) -> bool:
        return self.allowed is None or corpus in self.allowed

    def _search_corpora(self, requested: list[str] | None,
                        default: list[str] | None) -> list[str] | None:
        """The corpora a search may read; [] means "none of the visible ones exist yet"."""
        if self.allowed is None:
            return requested if requested is not None else default
        if requested is None:
            requested = default if default is not None else list(self.allowed)
        outside = [c for c in requested if c not in self.allowed]
        if outside:
            raise NotFoundError(
                f"corpus {', '.join(map(repr, outside))} is not available on this server; "
                f"available: {', '.join(self.allowed)}")
        # Resolve existence here so the store's "unknown corpus" message (which lists
        # every corpus in the store) never names corpora outside the allowed set.
        existing = self.kb.corpora()
        return [c for c in requested if c in existing]

    def _write_corpus(self, corpus: str | None) -> str:
        if corpus is None:
            if self.allowed is None or MEMORY_CORPUS in self.allowed:
                return MEMORY_CORPUS
            return self.allowed[0]
        if not self._visible(corpus):
            assert self.allowed is not None
            raise InvalidInputError(
                f"corpus {corpus!r} is not writable on this server; "
                f"writable: {', '.join(self.allowed)}")
        return corpus

    def _result(self, result: SearchResult | None, query: str, mode: str) -> SearchOut:
        if result is None:
            return SearchOut(query=query, mode=mode, answered_by="none", degraded=False,
                             notes=["none of the requested corpora has any items yet"], hits=[])
        vector_missing = mode != "fts" and not self.kb.has_vectors
        degraded = result.answered_by not in (mode, "none") or vector_missing
        hits = [
            HitOut(id=h.id, corpus=h.corpus, title=h.title, kind=h.kind,
                   snippet=snippet(h.text, query), score=round(h.score, 6),
                   source=h.source_label, url=h.source_url)
            for h in result.hits
        ]
        return SearchOut(query=result.query, mode=result.mode, answered_by=result.answered_by,
                         degraded=degraded, notes=list(result.notes), hits=hits)

    @staticmethod
    def _filters(filters: dict[str, Any] | None, **extra: Any) -> dict[str, Any] | None:
        out = dict(filters or {})
        for key, value in extra.items():
            if value is None:
                continue
            if key in out or (key == "kinds" and "kind" in out):
                raise InvalidInputError(
                    f"give {key!r} either as an argument or inside filters, not both")
            out[key] = value
        return out or None

    # -- read tools ---------------------------------------------------------------------------

    def search(
        self,
        query: Annotated[str, Field(
            description="What to look for: words, identifiers or a question.")],
        corpora: CorporaArg = None,
        kinds: KindsArg = None,
        filters: Annotated[dict[str, Any] | None, Field(description=(
            "Extra conditions: scope, repo, namespace (string or list), metadata "
            "({key: value}), created_after / created_before (ISO-8601), include_stale."))] = None,
        limit: LimitArg = 10,
        mode: Annotated[Mode, Field(description=(
            "hybrid (default: full text + vectors), fts (exact words and identifiers), "
            "vector (meaning only)."))] = "hybrid",
    ) -> SearchOut:
        names = self._search_corpora(corpora, None)
        if names == []:
            return self._result(None, query, mode)
        result = self.kb.search(query, mode=mode, limit=limit, corpora=names,
                                filters=self._filters(filters, kinds=kinds))
        return self._result(result, query, mode)

    def recall(
        self,
        query: Annotated[str, Field(description="What you want to remember, in your own words.")],
        limit: LimitArg = 10,
        kinds: KindsArg = None,
        scope: Annotated[str | None, Field(
            description="Only memories stored with this scope.")] = None,
        corpora: CorporaArg = None,
    ) -> SearchOut:
        default = None
        if corpora is None and self.allowed is not None:
            default = [MEMORY_CORPUS] if MEMORY_CORPUS in self.allowed and \
                self.kb.count(MEMORY_CORPUS) else list(self.allowed)
        names = self._search_corpora(corpora, default)
        if names == []:
            return self._result(None, query, "hybrid")
        result = self.kb.recall(query, limit=limit, corpora=names,
                                filters=self._filters(None, kinds=kinds, scope=scope),
                                touch=not self.read_only)
        return self._result(result, query, "hybrid")

    def get(
        self,
        ids: Annotated[list[str], Field(min_length=1, max_length=MAX_GET_IDS,
                                        description="Item ids from search or recall hits.")],
    ) -> GetOut:
        found = [it for it in self.kb.get_many(ids) if self._visible(it.corpus)]
        seen = {it.id for it in found}
        return GetOut(items=[_item_out(it) for it in found],
                      missing=[i for i in dict.fromkeys(ids) if i not in seen])

    def list_corpora(self) -> CorporaOut:
        counts = self.kb.corpora()
        names = sorted(counts) if self.allowed is None else list(self.allowed)
        return CorporaOut(
            corpora=[CorpusOut(name=n, count=counts.get(n, 0)) for n in names],
            vector_search=self.kb.has_vectors, embedder=self.kb.embedder_name,
            read_only=self.read_only,
        )

    # -- write tools --------------------------------------------------------------------------

    def remember(
        self,
        text: Annotated[str, Field(description="The memory itself, self-contained.")],
        kind: Annotated[str, Field(description=(
            "decision and lesson rank highest in recall; summary and temp_note lower; "
            "memory is neutral."))] = "memory",
        scope: Annotated[str | None, Field(
            description="Optional grouping, e.g. a project.")] = None,
        ttl: Annotated[float | None, Field(
            gt=0, description="Expire after this many seconds.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(
            description="JSON object kept with it.")] = None,
        corpus: Annotated[str | None, Field(description=(
            "Where to store it; default 'memory' (or this server's first corpus)."))] = None,
    ) -> RememberOut:
        target = self._write_corpus(corpus)
        new_id = self.kb.remember(text, kind=kind, scope=scope, ttl=ttl, metadata=metadata,
                                  corpus=target)
        item = self.kb.get(new_id)
        return RememberOut(id=new_id, corpus=target, expires_at=iso(item.expires_at))

    def forget(
        self, id: Annotated[str, Field(description="The id of the item to delete.")],
    ) -> ForgetOut:
        item = self.kb.get(id, include_expired=True)
        if not self._visible(item.corpus):
            raise NotFoundError(f"no item with id {id!r}")
        return ForgetOut(id=id, deleted=self.kb.forget(id))


_DESCRIPTIONS = {
    "search": (
        "Search the knowledge base (BM25 full text and vectors, fused). Use it before answering "
        "questions about the project's code, docs, decisions or past reviews. Returns compact hits "
        "(id, title, snippet, score, source); call `get` with ids for full text. Check "
        "`answered_by`/`degraded`: a degraded empty result is not proof that nothing exists."),
    "recall": (
        "Recall memories (decisions, lessons, notes stored with `remember`), ranked with the "
        "memory score policy (decisions and lessons first, frequently used and recent ones "
        "boosted). Use at the start of a task to reuse what was learned before."),
    "get": "Fetch full items (text, metadata, timestamps) by id, after search or recall.",
    "list_corpora": (
        "List the corpora this server can see with item counts, and whether vector search is "
        "available. Use it to choose `corpora` for search."),
    "remember": (
        "Store a memory for later recall: a decision, a lesson, a summary or a temporary note. "
        "Write one self-contained fact per call. Returns the new id."),
    "forget": "Delete one item by id (e.g. a memory that turned out wrong or obsolete).",
}


def build_server(kb: KnowledgeBase, read_only: bool = False,
                 corpora: Sequence[str] | None = None) -> MCPServer[Any]:
    """An MCP server over `kb`; `read_only` drops the write tools, `corpora` limits what it sees."""
    tools = _Tools(kb, read_only, corpora)
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        instructions=(
            "hybridkb is a searchable knowledge base and memory. Use search/recall before "
            "answering from scratch; use get for full text"
            + ("." if read_only else "; use remember to keep decisions and lessons.")),
        log_level="WARNING",
    )
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(_tool_errors(tools.search), description=_DESCRIPTIONS["search"],
                    annotations=read)
    server.add_tool(_tool_errors(tools.recall), description=_DESCRIPTIONS["recall"],
                    annotations=ToolAnnotations(read_only_hint=read_only, open_world_hint=False))
    server.add_tool(_tool_errors(tools.get), description=_DESCRIPTIONS["get"], annotations=read)
    server.add_tool(_tool_errors(tools.list_corpora), description=_DESCRIPTIONS["list_corpora"],
                    annotations=read)
    if not read_only:
        server.add_tool(_tool_errors(tools.remember), description=_DESCRIPTIONS["remember"],
                        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                    open_world_hint=False))
        server.add_tool(_tool_errors(tools.forget), description=_DESCRIPTIONS["forget"],
                        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                                    idempotent_hint=True, open_world_hint=False))
    return server


# -- transports -------------------------------------------------------------------------------

def _log_to_stderr() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")


def run_stdio(server: MCPServer[Any]) -> None:
    """Serve over stdin/stdout until the client closes stdin. Logs go to stderr only."""
    _log_to_stderr()
    server.run("stdio")


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


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerTokenMiddleware:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401.

    The check runs before the wrapped app sees the request, so nothing is touched.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise InvalidInputError("a bearer token must not be empty")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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


def run_http(server: MCPServer[Any], *, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT,
             token: str) -> None:
    """Serve streamable HTTP at http://host:port/mcp until interrupted."""
    import uvicorn

    _log_to_stderr()
    app = http_app(server, token=token, host=host)
    # log_config=None: uvicorn's default config sends access logs to stdout.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
