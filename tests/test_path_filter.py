"""Path and language filters: the glob translation (pure) and retrieval on both backends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import HashingEmbedder, InvalidFilterError, KnowledgeBase
from hybridkb.cli import cli
from hybridkb.ingest import index_folder
from hybridkb.pathglob import glob_regex, literal_prefix, paths_regex

PATHS = ["README.md", "src/app.py", "src/pkg/core.py", "src/pkg/core.pyi", "src/web/ui.ts",
         "docs/guide.md", "docs/api/ref.md", "srcx/other.py", "tests/test_app.py"]


@pytest.mark.parametrize(("pattern", "expected"), [
    ("src/**/*.py", ["src/app.py", "src/pkg/core.py"]),
    ("src/*.py", ["src/app.py"]),
    ("*.md", ["README.md", "docs/guide.md", "docs/api/ref.md"]),
    ("docs/", ["docs/guide.md", "docs/api/ref.md"]),
    ("docs", ["docs/guide.md", "docs/api/ref.md"]),
    ("src", ["src/app.py", "src/pkg/core.py", "src/pkg/core.pyi", "src/web/ui.ts"]),
    ("./src/web/", ["src/web/ui.ts"]),
    ("src/pkg/core.py", ["src/pkg/core.py"]),
    ("**/test_*.py", ["tests/test_app.py"]),
    ("src/pkg/core.py?", ["src/pkg/core.pyi"]),
    ("src/[aw]*", ["src/app.py"]),
    ("docs/**", ["docs/guide.md", "docs/api/ref.md"]),
    # a bare name (no / at all) at any depth, as .gitignore reads it; a leading / anchors it
    ("core.py", ["src/pkg/core.py"]),
    ("pkg", ["src/pkg/core.py", "src/pkg/core.pyi"]),
    ("api", ["docs/api/ref.md"]),
    ("api/", []),  # a folder with its slash: the top one (an index narrows by its prefix)
    ("/README.md", ["README.md"]),
    ("./*.md", ["README.md"]),
])
def test_glob_regex(pattern: str, expected: list[str]) -> None:
    regex = re.compile(glob_regex(pattern))
    assert [p for p in PATHS if regex.search(p)] == expected


def test_several_patterns_are_any_of_and_bad_ones_are_refused() -> None:
    regex = re.compile(paths_regex(["*.ts", "README.md"]))
    assert [p for p in PATHS if regex.search(p)] == ["README.md", "src/web/ui.ts"]
    assert re.compile(glob_regex("a+b(c).md")).search("a+b(c).md")
    assert not re.compile(glob_regex("a+b(c).md")).search("aab(c).md")
    for bad in ("", "   ", "x" * 501):
        with pytest.raises(InvalidFilterError):
            glob_regex(bad)
    with pytest.raises(InvalidFilterError, match="takes strings"):
        hybridkb.model.parse_filters({"path": 3})


def test_a_pattern_matches_only_paths_starting_with_its_literal_prefix() -> None:
    """The prefix an index finds candidates by never drops a path the regex matches."""
    import random

    rng = random.Random(5)
    parts = ["src", "docs", "a_b", "a%b", "we\\ird", "x.py", "y.md", "pkg", "[z]", "c?d"]
    paths = ["/".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    pieces = [*parts, "*", "**", "?", "*.py", "[ax]*"]
    patterns = ["/".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    patterns += [*(p + "/" for p in patterns[:50]), "src", "docs/", "**/x.py", "*.md", "/src/*"]
    narrowed = 0
    for pattern in patterns:
        regex, prefix = re.compile(glob_regex(pattern)), literal_prefix(pattern)
        narrowed += bool(prefix)
        for path in paths:
            if regex.search(path):
                assert path.startswith(prefix), (pattern, prefix, path)
    assert narrowed > 150  # most patterns here have a prefix to narrow by
    assert (literal_prefix("src/**/*.py"), literal_prefix("src/pkg/"), literal_prefix("*.md"),
            literal_prefix("cors.py"), literal_prefix("docs/")) == ("src/", "src/pkg", "", "", "docs")


def test_path_filters_with_like_wildcards_in_their_prefix(kb: KnowledgeBase) -> None:
    """`%`, `_` and backslash in a pattern are literal characters (PostgreSQL's LIKE prefix
    escapes them), on both backends."""
    for i, path in enumerate(["a_b/x.py", "axb/x.py", "a%b/x.py", "aZZb/x.py", "w\\d/x.py",
                              "wd/x.py"]):
        kb.add(f"marker text {i} " + " ".join(["alpha", "beta", "gamma", "delta"][:i % 4 + 1]) * (i + 1),
               id=f"p{i}", metadata={"path": path})
    for pattern, expected in (("a_b/*.py", ["a_b/x.py"]), ("a%b/", ["a%b/x.py"]),
                              ("w\\d/**", ["w\\d/x.py"]), ("a*/x.py", ["a%b/x.py", "aZZb/x.py", "a_b/x.py", "axb/x.py"])):
        found = kb.search("marker", mode="fts", limit=20, filters={"path": pattern},
                          dedup_threshold=None)
        assert sorted(str(h.metadata["path"]) for h in found.hits) == sorted(expected), pattern


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel in PATHS:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        body = f"shared marker word in {rel}\n"
        if rel.endswith((".py", ".pyi")):
            body = f"def marker_{len(rel)}():\n    '''shared marker word in {rel}'''\n"
        path.write_text(body)
    return root


def _found(kb: KnowledgeBase, mode: str, **filters: object) -> list[str]:
    result = kb.search("shared marker word", mode=mode, limit=50, filters=filters)
    return sorted(str(h.path) for h in result.hits)


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_path_and_language_filters_inside_retrieval(kb: KnowledgeBase, repo: Path, mode: str) -> None:
    index_folder(kb, repo, "repo")
    kb.add("shared marker word, a note without a path", id="note", corpus="repo")
    assert _found(kb, mode, path="src/**/*.py") == ["src/app.py", "src/pkg/core.py"]
    assert _found(kb, mode, path="docs/") == ["docs/api/ref.md", "docs/guide.md"]
    assert _found(kb, mode, path=["*.ts", "README.md"]) == ["README.md", "src/web/ui.ts"]
    assert _found(kb, mode, language="python") == sorted(
        ["src/app.py", "src/pkg/core.py", "src/pkg/core.pyi", "srcx/other.py", "tests/test_app.py"])
    assert _found(kb, mode, language="Markdown", path="docs/api") == ["docs/api/ref.md"]
    assert _found(kb, mode, path="nowhere/") == []
    # the filter is applied inside the query: a small limit still fills up with matching items
    few = kb.search("shared marker word", mode=mode, limit=2, filters={"path": "docs/"})
    assert sorted(str(h.path) for h in few.hits) == ["docs/api/ref.md", "docs/guide.md"]


def test_cli_search_path_and_language(tmp_path: Path, repo: Path) -> None:
    db = tmp_path / "kb.db"
    store = hybridkb.open(db, embedder=HashingEmbedder(64))
    index_folder(store, repo, "repo")
    store.close()
    result = CliRunner().invoke(cli, ["--db", str(db), "--embedder", "hashing-64", "--json", "search",
                                      "marker", "--path", "src/", "--language", "typescript"])
    assert result.exit_code == 0, result.output
    import json

    assert [h["path"] for h in json.loads(result.stdout)["hits"]] == ["src/web/ui.ts"]
