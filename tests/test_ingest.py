"""Folder indexing: the pure chunkers, the walk, and sync runs on a real store."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import hybridkb
from hybridkb import HashingEmbedder, Item, KnowledgeBase
from hybridkb.cli import cli
from hybridkb.ingest import (
    chunk_code,
    chunk_ids,
    chunk_markdown,
    chunk_text,
    find_files,
    index_folder,
)
from hybridkb.ingest.chunk import split_lines

# -- chunkers (pure) -----------------------------------------------------------------------

GUIDE = """Preamble line.

# Guide

Welcome to the guide.

## Install

pip install hybridkb

```sh
# a comment, not a heading

hybridkb init
```

## Usage

### Empty

#### Deep
deep text

Setext Title
============

Under a setext heading.
"""


def test_markdown_sections_carry_their_heading_path() -> None:
    chunks = chunk_markdown(GUIDE)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        (None, 1, 1),
        ("Guide", 3, 5),
        ("Guide > Install", 7, 15),
        ("Guide > Usage > Empty > Deep", 21, 22),
        ("Setext Title", 24, 27),
    ]
    lines = GUIDE.split("\n")
    for chunk in chunks:  # the text is exactly the lines it claims
        assert chunk.text == "\n".join(lines[chunk.start_line - 1:chunk.end_line])
    assert "# a comment, not a heading" in chunks[2].text


def test_a_heading_without_a_body_is_a_chunk_unless_its_child_follows() -> None:
    lone = chunk_markdown("# Zebra quokka handling: the frobnicator_v9\n")
    assert [(c.text, c.heading, c.start_line, c.end_line) for c in lone] == [
        ("# Zebra quokka handling: the frobnicator_v9", "Zebra quokka handling: the frobnicator_v9", 1, 1)]
    text = "# A one\n# B two\n\n## B child\nbody\n\n# C three\n\n---\n\nSetext D\n--------\n"
    chunks = chunk_markdown(text)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("A one", 1, 1),                # a sibling follows: its words are nowhere else
        ("B two > B child", 4, 5),      # B's child carries B in its heading path
        ("C three", 7, 9),              # a rule is a body
        ("C three > Setext D", 11, 12),
    ]
    assert chunk_markdown("#\n\n##\n") == []  # empty headings say nothing


def test_markdown_long_section_is_split_by_paragraphs() -> None:
    paragraph = " ".join(["retrieval"] * 40)  # ~400 characters
    text = "# Long\n\n" + "\n\n".join(f"{i} {paragraph}" for i in range(10)) + "\n\n# Next\n\nshort\n"
    chunks = chunk_markdown(text, max_chars=1500)
    long = [c for c in chunks if c.heading == "Long"]
    assert len(long) == 4 and all(len(c.text) <= 1500 for c in long)
    assert all(c.text.split("\n")[0].split(" ")[0] in "# 0 1 2 3 4 5 6 7 8 9" for c in long)
    assert "\n".join(c.text for c in long).count("retrieval") == 400  # nothing lost, nothing doubled
    assert chunks[-1].heading == "Next"


def test_text_packs_whole_paragraphs() -> None:
    text = "\n\n".join(f"para{i} " + "x" * 300 for i in range(12))
    chunks = chunk_text(text, max_chars=1000)
    assert [c.text.count("para") for c in chunks] == [3, 3, 3, 3]
    assert all(len(c.text) <= 1000 and c.heading is None for c in chunks)


def test_one_huge_line_is_cut() -> None:
    chunks = chunk_code("var a=" + "1," * 5000, "javascript", max_chars=3000)
    assert len(chunks) == 4 and all(c.start_line == c.end_line == 1 for c in chunks)
    assert all(len(c.text) <= 3000 for c in chunks)


PYTHON = '''"""Module docstring."""

import os

LIMIT = 3


# Parse the config file.
@cache
def parse_config(path):
    return open(path).read()


class Server:
    """Serves."""

    def run(self):
        return os.getpid()


async def main():
    await Server().run()


if __name__ == "__main__":
    main()
'''


def test_python_top_level_definitions() -> None:
    chunks = chunk_code(PYTHON, "python")
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        (None, 1, 5), ("parse_config", 8, 11), ("Server", 14, 18), ("main", 21, 22), (None, 25, 26),
    ]
    assert chunks[1].text.startswith("# Parse the config file.\n@cache\ndef parse_config")


def test_long_python_class_is_split_into_methods() -> None:
    body = "".join(f"    def m{i}(self):\n" + "        x = 1\n" * 12 + "\n" for i in range(6))
    chunks = chunk_code(f"class Big:\n    '''Doc.'''\n\n{body}", "python")
    assert [c.heading for c in chunks] == ["Big", *(f"Big.m{i}" for i in range(6))]
    assert chunks[0].text == "class Big:\n    '''Doc.'''"


def test_python_that_does_not_parse_falls_back_to_regex() -> None:
    chunks = chunk_code("def broken(:\n    pass\n\ndef fine():\n    pass\n", "python")
    assert [c.heading for c in chunks] == ["broken", "fine"]


@pytest.mark.parametrize(("language", "source", "symbols"), [
    ("go", 'package x\n\n// Hi says hi.\nfunc Hi() {\n}\n\nfunc (s *S) Run() error {\n\treturn nil\n}\n'
           "\ntype Point struct{ X int }\n", [None, "Hi", "Run", "Point"]),
    ("rust", "use std::io;\n\n#[derive(Debug)]\npub struct A;\n\nimpl A {\n    fn f() {}\n}\n\n"
             "pub(crate) async fn go() {}\n", [None, "A", "A", "go"]),
    ("typescript", 'import x from "y";\n\nexport async function load(a: string) {\n}\n'
                   "export const handler = async (req: Req): Promise<Res> => {\n};\n"
                   "export default class Foo {}\nexport interface Opts { a: number }\n",
     [None, "load", "handler", "Foo", "Opts"]),
    ("c", "#include <stdio.h>\n\n/* adds */\nstatic int add(int a, int b)\n{\n    return a + b;\n}\n\n"
          "int main(void) {\n    if (1) {}\n    return add(1, 2);\n}\n", [None, "add", "main"]),
    ("shell", "#!/bin/sh\nset -e\n\n# greet\ngreet() {\n  echo hi\n}\n", [None, "greet"]),
])
def test_regex_definitions(language: str, source: str, symbols: list[str | None]) -> None:
    assert [c.heading for c in chunk_code(source, language)] == symbols


def test_line_windows_overlap() -> None:
    text = "\n".join(f"key{i}: {i}" for i in range(1, 151))
    chunks = chunk_code(text, "yaml", window=60, overlap=10)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 60), (51, 110), (101, 150)]
    assert chunks[0].text.split("\n")[-10:] == chunks[1].text.split("\n")[:10]
    with pytest.raises(ValueError):
        chunk_code(text, "yaml", window=10, overlap=10)


def test_ids_survive_an_edit_above() -> None:
    before = chunk_code("import os\n\ndef a():\n    pass\n\ndef b():\n    pass\n", "python")
    after = chunk_code("import os\n\ndef new():\n    pass\n\ndef a():\n    return 1\n\ndef b():\n    pass\n",
                       "python")
    old_ids = dict(zip((c.heading for c in before), chunk_ids("r", "m.py", before, code=True), strict=True))
    new_ids = dict(zip((c.heading for c in after), chunk_ids("r", "m.py", after, code=True), strict=True))
    assert old_ids["b"] == new_ids["b"] == "r:m.py#b" and old_ids["a"] == new_ids["a"]
    twice = chunk_markdown("# FAQ\n\none\n\n# FAQ\n\ntwo\n\n# Get Started!\n\nthree\n")
    assert chunk_ids("r", "d.md", twice) == ["r:d.md#faq", "r:d.md#faq~2", "r:d.md#get-started"]


_LINES = st.lists(st.sampled_from(["", "# Head", "## Sub", "text here", "```", "Title", "=====", "---",
                                   "- item", "x" * 700, "   "]), max_size=40)


@settings(max_examples=150, deadline=None)
@given(_LINES, st.sampled_from(["markdown", "text", "go", "python"]))
def test_chunks_are_faithful_to_their_lines(lines: list[str], kind: str) -> None:
    text = "\n".join(lines)
    chunkers = {"markdown": chunk_markdown, "text": chunk_text}
    chunks = chunkers[kind](text) if kind in chunkers else chunk_code(text, kind)
    source = split_lines(text)
    for chunk in chunks:
        assert chunk.text.strip() and 1 <= chunk.start_line <= chunk.end_line <= len(source)
        assert chunk.text in "\n".join(source[chunk.start_line - 1:chunk.end_line])


# -- the walk ------------------------------------------------------------------------------


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def test_walk_respects_gitignore_at_every_level(tmp_path: Path) -> None:
    _write(tmp_path, {
        ".gitignore": "*.log\nbuild/\n",
        "a.py": "x = 1\n", "debug.log": "x", "build/gen.py": "x = 1\n",
        "pkg/.gitignore": "secret.py\n!keep.log\n", "pkg/secret.py": "x = 1\n", "pkg/keep.log": "x",
        "pkg/mod.py": "x = 1\n", "node_modules/m/index.js": "x\n", "env/pyvenv.cfg": "home = /usr\n",
        "env/lib/site.py": "x = 1\n", "image.png": b"\x89PNG", "package-lock.json": "{}\n",
        "big.txt": "x" * 1_000_001, "docs/README.md": "# Hi\n\nthere\n",
    })
    walked = find_files(tmp_path)
    assert [f.rel for f in walked.files] == ["a.py", "docs/README.md", "pkg/mod.py"]
    assert {s.path: s.reason for s in walked.skipped} == {
        "big.txt": "larger than 1 MB", "package-lock.json": "lock file"}
    only = find_files(tmp_path, include=["*.md"], exclude=["pkg/"])
    assert [f.rel for f in only.files] == ["docs/README.md"]


def test_walk_applies_the_enclosing_repository_gitignore(tmp_path: Path) -> None:
    _write(tmp_path, {".git/HEAD": "ref: refs/heads/main\n", ".gitignore": "sub/generated/\n",
                      "sub/a.py": "x = 1\n", "sub/generated/b.py": "x = 1\n"})
    assert [f.rel for f in find_files(tmp_path / "sub").files] == ["a.py"]


# -- sync on a real store ------------------------------------------------------------------

APP = '''"""The app."""


def parse_config(path):
    """Read the configuration file."""
    return open(path).read()


def start_server(port):
    return port
'''

REPO: dict[str, str | bytes] = {
    "src/app.py": APP,
    "src/util.go": "package util\n\nfunc Clamp(x int) int {\n\treturn x\n}\n",
    "docs/guide.md": "# Guide\n\nIntro.\n\n## Install\n\nRun pip install hybridkb.\n",
    "notes.txt": "Remember the milk.\n",
    ".gitignore": "secrets/\n",
    "secrets/key.py": "TOKEN = 'hunter2'\n",
    "assets/logo.txt": b"GIF89a\x00\x01",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    _write(root, REPO)
    return root


@pytest.fixture
def store(tmp_path: Path) -> Iterator[KnowledgeBase]:
    kb = hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(64))
    yield kb
    kb.close()


def _items(kb: KnowledgeBase) -> dict[str, Item]:
    return {item.id: item for item in kb.iter_items() if item.id is not None}


def test_index_sync_cycle(store: KnowledgeBase, repo: Path) -> None:
    first = index_folder(store, repo, "repo")
    assert (first.files_scanned, first.files_changed, first.chunks_added) == (5, 4, 8)
    assert [(s.path, s.reason) for s in first.skipped] == [("assets/logo.txt", "binary (NUL byte)")]
    items = _items(store)
    assert not any("key.py" in i for i in items)
    app = items["repo:src/app.py#parse_config"]
    assert app.title == "src/app.py › parse_config" and app.kind == "code"
    assert app.metadata["start_line"] == 4 and app.metadata["end_line"] == 6
    assert app.metadata["language"] == "python" and app.source_url == (repo / "src/app.py").resolve().as_uri()
    assert items["repo:docs/guide.md#guide/install"].kind == "document"

    again = index_folder(store, repo, "repo")
    assert (again.files_unchanged, again.files_changed, again.chunks_added, again.chunks_removed) == (4, 0, 0, 0)
    assert {i: it.updated_at for i, it in _items(store).items()} == {i: it.updated_at for i, it in items.items()}

    # a new function above, an edited one below: only app.py is touched, and only its edited chunk moves
    (repo / "src/app.py").write_text(APP.replace('"""The app."""\n', '"""The app."""\n\n\ndef hello():\n'
                                                 '    return "hi"\n').replace("return port", "return port + 1"))
    edit = index_folder(store, repo, "repo")
    assert (edit.files_changed, edit.files_unchanged) == (1, 3)
    assert (edit.chunks_added, edit.chunks_updated, edit.chunks_unchanged, edit.chunks_removed) == (1, 1, 2, 0)
    after = _items(store)
    for item_id, item in items.items():
        if item_id in ("repo:src/app.py#start_server",):
            assert after[item_id].updated_at > item.updated_at  # type: ignore[operator]
        else:
            assert after[item_id].updated_at == item.updated_at, item_id
    assert after["repo:src/app.py#parse_config"].metadata["start_line"] == 8  # moved, refreshed

    (repo / "docs/guide.md").unlink()
    gone = index_folder(store, repo, "repo")
    assert (gone.files_removed, gone.chunks_removed) == (1, 2)
    assert not any(i.startswith("repo:docs/") for i in _items(store))


def test_search_finds_a_function_with_its_source_label(store: KnowledgeBase, repo: Path) -> None:
    index_folder(store, repo, "repo")
    hit = store.search("parse_config", corpora=["repo"], limit=3).hits[0]
    assert hit.id == "repo:src/app.py#parse_config"
    assert hit.source_label == "[code: src/app.py › parse_config]"
    assert hit.title == "src/app.py › parse_config"


def test_index_leaves_other_items_and_corpora_alone(store: KnowledgeBase, repo: Path) -> None:
    store.add("a hand-written note", id="note", corpus="repo")
    index_folder(store, repo, "repo")
    index_folder(store, repo / "src", "code")
    (repo / "src/app.py").unlink()
    summary = index_folder(store, repo, "repo")
    assert summary.chunks_removed == 3
    assert store.get("note").text == "a hand-written note"
    assert store.count("code") == 5  # the other corpus still holds its app.py chunks


def test_non_utf8_is_replaced_and_reported(store: KnowledgeBase, tmp_path: Path) -> None:
    _write(tmp_path / "r", {"latin.txt": "café au lait\n".encode("latin-1")})
    summary = index_folder(store, tmp_path / "r", "r")
    assert summary.warnings == ["latin.txt: not valid UTF-8; undecodable bytes replaced"]
    assert "caf\ufffd au lait" in store.get("r:latin.txt#top").text


def test_a_file_turned_binary_loses_its_chunks(store: KnowledgeBase, repo: Path) -> None:
    index_folder(store, repo, "repo")
    (repo / "notes.txt").write_bytes(b"\x00\x01")
    summary = index_folder(store, repo, "repo")
    assert summary.chunks_removed == 1 and store.count("repo") == 7


def test_cli_index_json(tmp_path: Path, repo: Path) -> None:
    db = str(tmp_path / "cli.db")
    runner = CliRunner()
    args = ["--db", db, "--embedder", "hashing-64", "--json", "index", str(repo), "--corpus", "repo"]
    result = runner.invoke(cli, args, env={"HYBRIDKB_PROGRESS": "0"})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["corpus"] == "repo" and out["chunks_added"] == 8 and out["files_scanned"] == 5
    assert out["skipped"] == [{"path": "assets/logo.txt", "reason": "binary (NUL byte)"}]
    human = runner.invoke(cli, [a for a in args if a != "--json"] + ["--exclude", "*.md"])
    assert human.exit_code == 0, human.output
    assert "1 removed" in human.stdout and "skipped: assets/logo.txt" in human.stderr


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    _write(tmp_path / "outside", {"x.py": "x = 1\n"})
    _write(tmp_path / "r", {"a.py": "a = 1\n"})
    (tmp_path / "r" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "r" / "b.py").symlink_to(tmp_path / "r" / "a.py")
    assert [f.rel for f in find_files(tmp_path / "r").files] == ["a.py"]
