"""The MCP tool bodies over KnowledgeBase, the error mapping, and hit snippets.

Tools return pydantic models (see `schemas`) and never print: on stdio, stdout is
the protocol. Library errors become tool errors with their message in one place
(`tool_errors`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, TextContent
from pydantic import BaseModel, Field

from ..errors import HybridKBError, InvalidInputError, NotFoundError
from ..model import Hit, Mode, SearchResult, iso
from ..selection import client_corpus
from ..snippets import best_lines, snippet
from ..store import MEMORY_CORPUS, KnowledgeBase
from .schemas import (
    MAX_GET_IDS,
    MAX_MEMORY_CHARS,
    MAX_QUERY_CHARS,
    CorporaArg,
    CorporaOut,
    CorpusOut,
    ForgetOut,
    GetOut,
    HitOut,
    KindsArg,
    LimitArg,
    QueryArg,
    RememberOut,
    SearchOut,
    item_out,
)

SNIPPET_CHARS = 200


def hit_snippet(hit: Hit, query: str) -> tuple[str, int | None]:
    """The lines around the best match for a hit from a file (and that line), else a text window."""
    if hit.path is not None and hit.start_line is not None:
        shown = best_lines(hit.text, query, first_line=hit.start_line, max_lines=5, max_width=120)
        return "\n".join(shown.lines), shown.best
    return snippet(hit.text, query, SNIPPET_CHARS), None


# -- error mapping and result shaping: the one place ---------------------------------------------

def tool_errors(fn: Callable[..., BaseModel]) -> Callable[..., CallToolResult]:
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

class Tools:
    """The tool bodies: argument translation over KnowledgeBase, corpus visibility, result shaping."""

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
        return client_corpus(corpus, MEMORY_CORPUS, self.allowed, self.kb.corpora())

    def _result(self, result: SearchResult | None, query: str, mode: str) -> SearchOut:
        if result is None:
            return SearchOut(query=query, mode=mode, answered_by="none", degraded=False,
                             notes=["none of the requested corpora has any items yet"], hits=[])
        vector_missing = mode != "fts" and not self.kb.has_vectors
        degraded = result.answered_by not in (mode, "none") or vector_missing
        hits = [
            HitOut(id=h.id, corpus=h.corpus, title=h.title, kind=h.kind,
                   snippet=text, score=round(h.score, 6), source=h.source_label, url=h.source_url,
                   path=h.path, line=line, start_line=h.start_line, end_line=h.end_line)
            for h in result.hits
            for text, line in [hit_snippet(h, query)]
        ]
        return SearchOut(query=result.query, mode=result.mode, answered_by=result.answered_by,
                         degraded=degraded, confidence=result.confidence, notes=list(result.notes),
                         hits=hits)

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
        query: QueryArg,
        corpora: CorporaArg = None,
        kinds: KindsArg = None,
        filters: Annotated[dict[str, Any] | None, Field(description=(
            "Extra conditions: scope, repo, namespace (string or list), metadata "
            "({key: value}), created_after / created_before (ISO-8601), include_stale."))] = None,
        limit: LimitArg = 10,
        mode: Annotated[Mode, Field(description=(
            "hybrid (default: full text + vectors), fts (exact words and identifiers), "
            "vector (meaning only)."))] = "hybrid",
        path: Annotated[str | list[str] | None, Field(description=(
            "Only hits from indexed files matching this glob, under this folder, or of this "
            "name at any depth, e.g. 'src/**/*.py', 'src/pkg/', '*.md', 'cors.py'; an absolute "
            "path inside an indexed folder works too (or a list: any of them)."))] = None,
        language: Annotated[str | list[str] | None, Field(description=(
            "Only hits from indexed files of this language: python, markdown, typescript..."))] = None,
        merge: Annotated[Literal["relevance", "rrf"], Field(description=(
            "How several corpora merge: relevance (default: every hit competes on one "
            "score) or rrf (each corpus gets equal say: their rankings interleave)."))] = "relevance",
    ) -> SearchOut:
        names = self._search_corpora(corpora, None)
        if names == []:
            return self._result(None, query, mode)
        result = self.kb.search(query, mode=mode, limit=limit, corpora=names, merge=merge,
                                filters=self._filters(filters, kinds=kinds, path=path, language=language))
        return self._result(result, query, mode)

    def recall(
        self,
        query: Annotated[str, Field(max_length=MAX_QUERY_CHARS, description=(
            "What you want to remember, in your own words."))],
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
        return GetOut(items=[item_out(it) for it in found],
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
        text: Annotated[str, Field(max_length=MAX_MEMORY_CHARS, description=(
            f"The memory itself, self-contained (at most {MAX_MEMORY_CHARS} characters)."))],
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
        # the delete itself is limited to the visible corpora (the item may move meanwhile)
        return ForgetOut(id=id, deleted=self.kb.delete(id, within=self.allowed))
