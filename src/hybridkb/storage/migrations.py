"""Versioned SQL migrations per dialect, applied by name in order."""

from __future__ import annotations

from importlib import resources


def load(dialect: str) -> list[tuple[str, str]]:
    """(name, sql) pairs of `hybridkb.storage.<dialect>/migrations`, sorted by numeric prefix."""
    folder = resources.files(f"hybridkb.storage.{dialect}") / "migrations"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name.removesuffix(".sql"), p.read_text(encoding="utf-8")) for p in files]
