"""What each MCP tool returns: pydantic models, so clients get an output schema per tool."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from ..model import StoredItem, iso

MAX_LIMIT = 100
MAX_GET_IDS = 100
# Longer text fields are refused before anything runs: a query is a question, not a
# document (the model reads ~8 kB of it at most), and a memory is one fact.
MAX_QUERY_CHARS = 10_000
MAX_MEMORY_CHARS = 100_000


class HitOut(BaseModel):
    id: str = Field(description="Pass to `get` for the full text.")
    corpus: str
    title: str | None
    kind: str | None
    snippet: str = Field(description=(
        "A short window of the text around the matched terms (for a file: the lines around "
        "the best-matching line)."))
    score: float
    source: str = Field(description="Human-readable source label, e.g. [wiki: Page Title].")
    url: str | None = Field(default=None, description="The source's URL, when it has one.")
    path: str | None = Field(default=None, description=(
        "For a hit from an indexed file: its path, relative to the indexed folder."))
    line: int | None = Field(default=None, description=(
        "The file line that best matches the query (the snippet shows the lines around it)."))
    start_line: int | None = Field(default=None, description="The hit's first line in its file.")
    end_line: int | None = Field(default=None, description="The hit's last line in its file.")

    @model_serializer(mode="wrap")
    def _leave_out_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A hit without a file or URL (a memory) carries no null file fields: agents pay per token."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k not in _OPTIONAL_HIT_FIELDS}


_OPTIONAL_HIT_FIELDS = frozenset({"url", "path", "line", "start_line", "end_line"})


class SearchOut(BaseModel):
    query: str
    mode: str
    answered_by: str = Field(description=(
        "Which path produced the hits: hybrid, fts (full text only), vector, substring "
        "(last-resort fallback) or none (no path found anything)."))
    degraded: bool = Field(description=(
        "True when the full requested search could not run (e.g. no embedder: full text "
        "only). An empty degraded result does not prove that nothing relevant exists."))
    confidence: str = Field(default="none", description=(
        "How likely the best hit answers the query, by its calibrated relevance: high "
        "(>= 0.5), low (>= 0.2) or none (below 0.2, or no hit: nothing relevant found)."))
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


def item_out(item: StoredItem) -> ItemOut:
    return ItemOut(
        id=item.id, corpus=item.corpus, title=item.title, kind=item.kind, text=item.text,
        scope=item.scope, repo=item.repo, namespace=item.namespace, source_url=item.source_url,
        metadata=item.metadata, created_at=iso(item.created_at), updated_at=iso(item.updated_at),
        expires_at=iso(item.expires_at), access_count=item.access_count,
        last_accessed_at=iso(item.last_accessed_at), stale=item.stale,
    )


# -- tool arguments shared by several tools ----------------------------------------------------

CorporaArg = Annotated[list[str] | None, Field(
    description="Only these corpora (see list_corpora); default: every corpus this server sees.")]
KindsArg = Annotated[list[str] | None, Field(
    description="Only items of these kinds, e.g. decision, lesson, wiki_page, code.")]
LimitArg = Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Maximum number of hits.")]
QueryArg = Annotated[str, Field(max_length=MAX_QUERY_CHARS, description=(
    f"What to look for: words, identifiers or a question (at most {MAX_QUERY_CHARS} characters). "
    'Also reads "a phrase", +required, -excluded, prefix*, title:word, kind:x, path:glob, '
    "language:x (a malformed query is read as plain words, with a note)."))]

DESCRIPTIONS = {
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
