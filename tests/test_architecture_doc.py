"""docs/architecture.md names every module of the package, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "hybridkb"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _modules() -> set[str]:
    return {p.name for p in SRC.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_every_module_is_in_the_architecture_doc() -> None:
    missing = sorted(name for name in _modules() if name not in DOC)
    assert missing == [], f"docs/architecture.md does not describe: {missing}"


def test_the_architecture_doc_names_no_missing_module() -> None:
    named = set(re.findall(r"\b([a-z_]+\.py)\b", DOC))
    gone = sorted(n for n in named - _modules() if n != "__init__.py" and not (ROOT / "tests" / n).exists()
                  and n != "sqlean.py")  # a tests/ file, or the sqlite3 drop-in package
    assert gone == [], f"docs/architecture.md names modules that do not exist: {gone}"
