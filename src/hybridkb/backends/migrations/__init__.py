"""Versioned SQL migrations per backend, applied by name in order."""

from __future__ import annotations

from importlib import resources


def load(backend: str) -> list[tuple[str, str]]:
    """(name, sql) pairs for `backend`, sorted by their numeric prefix."""
    folder = resources.files("hybridkb.backends.migrations") / backend
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name.removesuffix(".sql"), p.read_text(encoding="utf-8")) for p in files]
