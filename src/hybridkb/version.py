"""The installed package's version, read once from its metadata (one source: pyproject.toml)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def package_version() -> str:
    """"0.1.0" as installed; "0+unknown" when running from a tree that was never installed."""
    try:
        return version("hybridkb")
    except PackageNotFoundError:
        return "0+unknown"
