"""Versioned SQL migrations per dialect, applied by name in order."""

from __future__ import annotations

from importlib import resources


def load(dialect: str) -> list[tuple[str, str]]:
    """(name, sql) pairs of `hybridkb.storage.<dialect>/migrations`, sorted by numeric prefix."""
    folder = resources.files(f"hybridkb.storage.{dialect}") / "migrations"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name.removesuffix(".sql"), p.read_text(encoding="utf-8")) for p in files]


def newer_schema(applied: set[str], dialect: str) -> str | None:
    """Why a store must not be written by this version, or None.

    A migration recorded in the store that this version does not ship means a newer
    hybridkb changed the schema: writing with the old code could break what it relies on.
    """
    known = {name for name, _ in load(dialect)}
    unknown = sorted(applied - known)
    if not unknown:
        return None
    numbers = [int(n.split("_", 1)[0]) for n in unknown if n.split("_", 1)[0].isdigit()]
    schema = max(numbers) if numbers else unknown[-1]
    return (f"this store was made by a newer hybridkb (schema {schema}); upgrade hybridkb to "
            f"write to it (reading still works)")
