"""Human-readable source labels for hits: `[wiki: Page Title]`, `[code: src/app.py]`. Pure."""

from __future__ import annotations

from typing import Any

from .validation import label_template_problem

_MEMORY_KINDS = frozenset({"decision", "lesson", "summary", "temp_note", "memory", "note"})
_KIND_PREFIX = {"wiki_page": "wiki", "review_comment": "review", "code": "code", "document": "doc"}


class _Defaulting(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return ""


def source_label(
    *, corpus: str, kind: str | None, title: str | None, item_id: str,
    metadata: dict[str, Any], template: str | None = None,
) -> str:
    """Label from the corpus's template if it has one, else from kind and title."""
    if template and label_template_problem(template) is None:
        fields = _Defaulting(metadata)
        fields.update(corpus=corpus, kind=kind or "", title=title or "", id=item_id)
        try:
            return template.format_map(fields)
        except (ValueError, IndexError, AttributeError, TypeError, KeyError):
            pass  # a value its spec does not fit (a list cut to .10) falls back to the default
    if kind in _MEMORY_KINDS:
        return f"[memory: {kind}]"
    prefix = _KIND_PREFIX.get(kind or "", corpus)
    return f"[{prefix}: {title or item_id}]"
