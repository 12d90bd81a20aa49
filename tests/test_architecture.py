"""The shape of the package, read from the source with `ast`: layers, purity, size.

Layers, top to bottom (an import may only go to its own layer or one below):

    faces     cli, cli_options, config, mcp/*, mcp_server, transfer, evaluation/*, ingest/*,
              web/*, adapters/*
    api       hybridkb/__init__.py (open() picks a storage dialect)
    core      store (KnowledgeBase), batches, print_worker, store_filters, item_input
    pipeline  pipeline
    storage   storage/*            embedding/* (providers: models, no store)
    pure      errors, model, fusion, dedup, scoring, textquery, querysyntax, labels, progress,
              validation, selection, version

Faces reach the store only through KnowledgeBase, the api and the pure records:
they never import the pipeline or a storage module. Ingest is a face (it writes
through KnowledgeBase); embedding is a provider beside storage: both are used by
the core and know nothing above them.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "hybridkb"
MAX_LINES = 600

PURE = {"errors", "model", "fusion", "dedup", "scoring", "textquery", "querysyntax", "labels", "progress",
        "validation", "selection", "version", "snippets", "pathglob", "calibration"}
FACE_PACKAGES = ("mcp", "evaluation", "ingest", "web", "adapters")
FACE_MODULES = {"cli", "cli_options", "cli_common", "cli_index", "cli_progress", "cli_transfer", "config",
                "mcp_server", "transfer", "background", "watch"}
RANK = {"pure": 0, "storage": 1, "embedding": 1, "pipeline": 2, "core": 3, "api": 4, "face": 5}
# Imports a layer may make, beyond its own layer and pure modules.
ALLOWED = {
    "pure": set(),
    "storage": set(),
    "embedding": set(),
    "pipeline": {"storage"},
    "core": {"pipeline", "storage", "embedding"},
    "api": {"core", "storage", "embedding"},
    "face": {"api", "core", "embedding"},
}
# The package root re-exports face functions a user calls from Python (`hybridkb.index_folder`),
# loaded lazily by its module `__getattr__`, so `import hybridkb` still loads no face.
REEXPORTS = {"hybridkb": {"hybridkb.ingest"}}
# Standard-library and driver modules that do I/O: none of them in a pure module.
IO_MODULES = {
    "os", "io", "pathlib", "sqlite3", "socket", "subprocess", "shutil", "tempfile", "gzip",
    "urllib", "http", "asyncio", "threading", "multiprocessing", "select", "signal", "psycopg",
    "psycopg_pool", "pgvector", "sqlite_vec", "requests", "httpx", "uvicorn", "anyio", "mcp",
    "onnxruntime", "tokenizers", "click",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def layer(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "api"
    top = parts[1]
    if top in PURE and len(parts) == 2:
        return "pure"
    if top in ("storage", "backends"):
        return "storage"
    if top == "embedding":
        return "embedding"
    if top == "pipeline":
        return "pipeline"
    if top in ("store", "batches", "print_worker", "store_filters", "noise", "item_input"):  # KnowledgeBase, helpers
        return "core"
    if top in FACE_MODULES or top in FACE_PACKAGES:
        return "face"
    raise AssertionError(f"{name} has no layer: add it to tests/test_architecture.py")


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text("utf-8"), filename=str(modules()[name]))


def imports(name: str, source: ast.Module | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import in the module, functions included; relative ones resolved."""
    known = modules()
    is_package = name in known and known[name].name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(source or tree(name)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import pipeline` imports a module
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in known else target))
    return found


def internal(found: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(line, m) for line, m in found if m == "hybridkb" or m.startswith("hybridkb.")]


def layer_violations(name: str, source: ast.Module | None = None) -> list[str]:
    own = layer(name)
    wrong = []
    for line, target in internal(imports(name, source)):
        if target in REEXPORTS.get(name, ()):
            continue
        theirs = layer(target)
        if theirs != own and theirs != "pure" and theirs not in ALLOWED[own]:
            wrong.append(f"{name}:{line} ({own}) imports {target} ({theirs})")
    return wrong


def io_imports(name: str, source: ast.Module | None = None) -> list[str]:
    found = [f"line {line}: {m}" for line, m in imports(name, source) if m.split(".")[0] in IO_MODULES]
    return found + [f"line {node.lineno}: open()" for node in ast.walk(source or tree(name))
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "open"]


def storage_imports(name: str, source: ast.Module | None = None) -> list[str]:
    return [m for _, m in internal(imports(name, source))
            if m.startswith(("hybridkb.storage", "hybridkb.backends", "hybridkb.pipeline"))]


def backend_uses(source: ast.Module) -> list[int]:
    return [node.lineno for node in ast.walk(source)
            if (isinstance(node, ast.Attribute) and node.attr == "backend")
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "backend")]


ALL = sorted(modules())


def test_every_module_has_a_layer() -> None:
    assert {"hybridkb.store", "hybridkb.cli", "hybridkb.pipeline", "hybridkb.model"} <= set(ALL)
    assert any(layer(n) == "storage" for n in ALL)
    for name in ALL:
        layer(name)


@pytest.mark.parametrize("name", ALL)
def test_imports_only_go_down(name: str) -> None:
    wrong = layer_violations(name)
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", [n for n in ALL if layer(n) == "pure"])
def test_pure_modules_do_no_io(name: str) -> None:
    found = io_imports(name)
    assert not found, f"{name} is pure but does I/O: {found}"


@pytest.mark.parametrize("name", [n for n in ALL if layer(n) == "face"])
def test_faces_never_import_storage_or_pipeline(name: str) -> None:
    bad = storage_imports(name)
    assert not bad, f"{name} reaches past KnowledgeBase: {bad}"


@pytest.mark.parametrize("name", ALL)
def test_backend_is_reached_only_by_the_core_and_storage(name: str) -> None:
    if layer(name) in ("core", "storage"):
        return
    uses = backend_uses(tree(name))
    assert not uses, f"{name} reads `.backend` at lines {uses}; add a KnowledgeBase method instead"


@pytest.mark.parametrize("name", ALL)
def test_modules_stay_small(name: str) -> None:
    lines = len(modules()[name].read_text("utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it by concern (limit {MAX_LINES})"


def test_the_checks_catch_what_they_guard() -> None:
    """Each check, fed a module that breaks its rule, reports it (lazy imports included)."""
    face = ast.parse(
        "from ..storage.sqlite import backend\n"
        "def f(kb):\n"
        "    from hybridkb import pipeline\n"
        "    return kb.backend.url, getattr(kb, 'backend')\n")
    assert len(layer_violations("hybridkb.mcp.tools", face)) == 2
    assert storage_imports("hybridkb.mcp.tools", face) == [
        "hybridkb.storage.sqlite.backend", "hybridkb.pipeline"]
    assert backend_uses(face) == [4, 4]
    pure = ast.parse("import os\nfrom .store import KnowledgeBase\ndef g(p):\n    return open(p)\n")
    assert io_imports("hybridkb.fusion", pure) == ["line 1: os", "line 4: open()"]
    assert layer_violations("hybridkb.fusion", pure) == [
        "hybridkb.fusion:2 (pure) imports hybridkb.store (core)"]
    storage = ast.parse("from ...pipeline import run\n")
    assert layer_violations("hybridkb.storage.sqlite.backend", storage) == [
        "hybridkb.storage.sqlite.backend:1 (storage) imports hybridkb.pipeline (pipeline)"]
    assert RANK["face"] > RANK["core"] > RANK["pipeline"] > RANK["storage"] > RANK["pure"]
