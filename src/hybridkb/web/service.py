"""What the REST API and the page do with a KnowledgeBase, free of HTTP: dicts in, dicts out.

It owns the server's rules (read-only, the corpora it may see) and the JSON
shapes; `api.py` only turns requests into calls and errors into statuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError, NotFoundError
from ..fusion import DEFAULT_FUSION
from ..labels import source_label
from ..model import Hit, Item, SearchResult, iso
from ..selection import client_corpus
from ..store import MEMORY_CORPUS, KnowledgeBase
from .context import MAX_AROUND, item_context
from .facets import FACET_POOL, facet_counts
from .highlight import hit_snippet, location, term_spans

MAX_LIMIT = 100


class ReadOnlyError(InvalidInputError):
    """A write asked of a server started with --read-only."""


def hit_json(hit: Hit, query: str, *, with_text: bool = False) -> dict[str, Any]:
    """A hit as the API returns it: compact, with its snippet (lines kept; `snippet_line` is the
    file line it starts at), the snippet's marks, `path:line` and explanation."""
    data = hit.to_dict(explain=True)
    text = data.pop("text")
    cut, first_line = hit_snippet(text, query, hit.start_line if hit.path else None)
    data["snippet"] = cut
    data["snippet_line"] = first_line
    data["highlights"] = [list(span) for span in term_spans(cut, query)]
    data["location"] = location(hit.metadata)
    if with_text:
        data["text"] = text
    return data


def item_json(item: Item) -> dict[str, Any]:
    data = item.to_dict()
    for key in ("created_at", "updated_at", "expires_at", "last_accessed_at"):
        data[key] = iso(data[key])
    data["location"] = location(item.metadata)
    return data


class Service:
    """The REST operations over one KnowledgeBase, under one server's rules."""

    def __init__(self, kb: KnowledgeBase, *, read_only: bool = False,
                 corpora: Sequence[str] | None = None) -> None:
        self.kb, self.read_only = kb, read_only
        self.allowed: tuple[str, ...] | None = tuple(dict.fromkeys(corpora)) if corpora else None

    # -- rules --------------------------------------------------------------------------------

    def _visible(self, corpus: str) -> bool:
        return self.allowed is None or corpus in self.allowed

    def _search_corpora(self, requested: list[str] | None) -> list[str] | None:
        if self.allowed is None:
            return requested
        outside = [c for c in requested or () if c not in self.allowed]
        if outside:
            raise NotFoundError(f"corpus {', '.join(map(repr, outside))} is not available on this "
                                f"server; available: {', '.join(self.allowed)}")
        existing = self.kb.corpora()
        return [c for c in (requested or self.allowed) if c in existing]

    def _writable(self, corpus: str | None, default: str) -> str:
        if self.read_only:
            raise ReadOnlyError("this server is read-only (started with --read-only)")
        return client_corpus(corpus, default, self.allowed, self.kb.corpora())

    # -- reads --------------------------------------------------------------------------------

    def search(self, query: str, *, corpora: list[str] | None = None, kinds: list[str] | None = None,
               languages: list[str] | None = None, path: str | None = None,
               filters: Mapping[str, Any] | None = None, mode: str = "hybrid",
               fusion: str | None = None, limit: int = 10, offset: int = 0,
               with_text: bool = False, facets: bool = False) -> dict[str, Any]:
        if not isinstance(query, str):
            raise InvalidInputError("query must be a string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise InvalidInputError(f"limit must be an integer from 1 to {MAX_LIMIT}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be an integer >= 0, got {offset!r:.60}")
        if filters is not None and not isinstance(filters, Mapping):
            raise InvalidInputError("filters must be a JSON object")
        for name, value in (("corpora", corpora), ("kinds", kinds), ("languages", languages)):
            if value is not None and (not isinstance(value, list)
                                      or not all(isinstance(v, str) for v in value)):
                raise InvalidInputError(f"{name} must be a list of strings")
        if path is not None and not isinstance(path, str):
            raise InvalidInputError("path must be a string")
        merged = dict(filters or {})
        if kinds:
            if "kind" in merged or "kinds" in merged:
                raise InvalidInputError("give kinds either as a parameter or inside filters, not both")
            merged["kind"] = kinds
        if languages:
            if "language" in merged or "languages" in merged:
                raise InvalidInputError("give languages either as a parameter or inside filters, "
                                        "not both")
            merged["language"] = languages
        if path:
            if "path" in merged or "paths" in merged:
                raise InvalidInputError("give path either as a parameter or inside filters, not both")
            merged["path"] = path
        names = self._search_corpora(corpora)
        # With facets, one search fetches the pool they count over and the page is cut from it.
        pool = max(FACET_POOL, offset + limit) if facets else limit
        if names == []:
            result = SearchResult(hits=[], answered_by="none", mode=mode, query=query,
                                  notes=["none of the requested corpora has any items yet"])
        else:
            result = self.kb.search(query, corpora=names, filters=merged or None, mode=mode,
                                    fusion=fusion, limit=pool, offset=0 if facets else offset)
        hits = result.hits[offset:offset + limit] if facets else result.hits
        data: dict[str, Any] = {
            "query": result.query, "mode": result.mode, "fusion": fusion or DEFAULT_FUSION,
            "answered_by": result.answered_by, "confidence": result.confidence,
            "notes": list(result.notes),
            "hits": [hit_json(h, query, with_text=with_text) for h in hits],
        }
        if facets:
            data["facets"] = facet_counts(result.hits)
            data["facet_pool"] = len(result.hits)
        return data

    def get(self, item_id: str, *, context: int = 0) -> dict[str, Any]:
        """The item; with `context` > 0 also that many lines around it in its file."""
        if isinstance(context, bool) or not isinstance(context, int) or not 0 <= context <= MAX_AROUND:
            raise InvalidInputError(f"context must be an integer from 0 to {MAX_AROUND}")
        item = self.kb.get(item_id)
        if not self._visible(item.corpus):
            raise NotFoundError(f"no item with id {item_id!r}")
        data = item_json(item)
        if context:
            data["context"] = item_context(self.kb, item, context)
        data["source"] = source_label(corpus=item.corpus, kind=item.kind, title=item.title,
                                      item_id=item_id, metadata=item.metadata,
                                      template=self.kb.label_templates().get(item.corpus))
        return data

    def stats(self) -> dict[str, Any]:
        data = self.kb.stats()
        if self.allowed is not None:
            data["corpora"] = {c: n for c, n in data["corpora"].items() if c in self.allowed}
            data["items"] = sum(data["corpora"].values())
            for key in ("items_without_vectors", "awaiting_embedding"):  # store-wide counts
                data.pop(key, None)
        data["read_only"] = self.read_only
        return data

    def corpora(self) -> dict[str, Any]:
        counts = self.kb.corpora()
        names = sorted(counts) if self.allowed is None else list(self.allowed)
        return {"corpora": [{"name": n, "count": counts.get(n, 0)} for n in names],
                "vector_search": self.kb.has_vectors, "embedder": self.kb.embedder_name,
                "read_only": self.read_only}

    # -- writes -------------------------------------------------------------------------------

    def add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        data = dict(body)
        replace = data.pop("replace", False)
        if not isinstance(replace, bool):
            raise InvalidInputError("replace must be true or false")
        text = data.pop("text", None)
        if not isinstance(text, str):
            raise InvalidInputError("an item needs a text (a string)")
        data["corpus"] = self._writable(data.get("corpus"), "default")
        if self.allowed is not None and data.get("id") is not None:
            self._own_id(data["id"], replace)
        # A replace's own statement checks that the item it replaces is one this server shows.
        new_id = (self.kb.upsert(text, within=self.allowed, **data) if replace
                  else self.kb.add(text, **data))
        return {"id": new_id, "corpus": data["corpus"]}

    def _own_id(self, item_id: Any, replace: bool) -> None:
        """Ids are store-wide: on a server limited to some corpora a caller's id must name one
        of their items (to replace it, or to be told it exists). An id that is unused, or
        held by an item this server may not see, gets one answer, so neither is revealed."""
        if not isinstance(item_id, str):
            return  # the store's own check names the problem
        found = self.kb.get_many([item_id], include_expired=True)
        if found and self._visible(found[0].corpus):
            return  # replace it, or "already exists" (the caller can see it anyway)
        assert self.allowed is not None
        if replace:
            raise NotFoundError(f"no item with id {item_id!r} to replace on this server (it is "
                                f"limited to corpora {', '.join(self.allowed)})")
        raise InvalidInputError(
            f"this server assigns the ids of new items (it is limited to corpora "
            f"{', '.join(self.allowed)}, and ids are store-wide): leave out id {item_id!r}, or "
            "replace an item of these corpora")

    def remember(self, body: Mapping[str, Any]) -> dict[str, Any]:
        data = dict(body)
        text = data.pop("text", None)
        if not isinstance(text, str):
            raise InvalidInputError("a memory needs a text (a string)")
        unknown = set(data) - {"kind", "scope", "ttl", "metadata", "corpus", "title"}
        if unknown:
            raise InvalidInputError(f"unknown field(s): {', '.join(sorted(unknown))}")
        corpus = self._writable(data.pop("corpus", None), MEMORY_CORPUS)
        new_id = self.kb.remember(text, corpus=corpus, **data)
        item = self.kb.get(new_id)
        return {"id": new_id, "corpus": corpus, "expires_at": iso(item.expires_at)}

    def delete(self, item_id: str) -> dict[str, Any]:
        if self.read_only:
            raise ReadOnlyError("this server is read-only (started with --read-only)")
        item = self.kb.get(item_id, include_expired=True)
        if not self._visible(item.corpus):
            raise NotFoundError(f"no item with id {item_id!r}")
        return {"id": item_id, "deleted": self.kb.delete(item_id, within=self.allowed)}
