"""The README's and docs' examples run, and what they show has the shape the code gives.

Python blocks run in order, one namespace per file, in a folder a reader would have (a
store of a few notes made with the default model, a small repository, notes.jsonl);
a value written in a comment (`x  # 0.83, "[wiki: Storage]"`) is compared in shape with
what the expression gives. The REST hit example has the served fields. The CLI lines of
the shell blocks exit 0 (`--json` ones print one JSON object), and a shown CLI output
prints its scores with the digits the CLI prints. Shapes, not values: a ranking change
moves scores, not their form. Examples that need a server (PostgreSQL, `serve`) or a
dataset (`eval`) are named and left out.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import io
import json
import re
import shlex
import shutil
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SERVER = re.compile(r"postgres(ql)?://")
# CLI lines left out, and why: each needs something a test folder does not have.
NOT_RUN = {
    "serve": "starts a server (tests/test_web.py, tests/test_mcp.py)",
    "eval": "needs a BEIR dataset (tests/test_evaluation.py)",
    "--watch": "runs until Ctrl-C (tests/test_watch.py)",
    "postgresql://": "needs a PostgreSQL server (the parametrized suite)",
}
ANY_ID = "note-1"  # what a line's `ID` stands for: an item of notes.jsonl


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(lang: str, paths: list[Path] = DOCS) -> list[Block]:
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                found.append(Block(path, text[: m.start()].count("\n") + 1, lang, m.group(2)))
    return found


# -- the reader's folder --------------------------------------------------------------------

APP_PY = '''"""A small app."""


def retry_budget(calls):
    """The retry budget for a batch of calls."""
    return max(1, len(calls) // 10)


def parse_config(text):
    """Parse the config file: one key=value per line."""
    config = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        config[key.strip()] = value.strip()
    return config
'''


def seed(kb: hybridkb.KnowledgeBase) -> None:
    kb.add("We keep all data in one SQLite file, with the vectors beside the text.",
           title="Storage", corpus="wiki", kind="wiki_page")
    kb.add("def connect(path):\n    return sqlite3.connect(path)", title="src/db.py", kind="code",
           corpus="code", metadata={"path": "src/db.py", "start_line": 12, "end_line": 13})
    kb.add("Run migration_032 before deploying billing", kind="decision", corpus="ops")


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kb.db (default model, a few items), a repository, notes.jsonl, a docs folder."""
    base = tmp_path_factory.mktemp("reader")
    with hybridkb.open(base / "kb.db") as kb:
        seed(kb)
    for repo in ("repo", "myrepo"):
        (base / repo / "src").mkdir(parents=True)
        (base / repo / "src" / "app.py").write_text(APP_PY, encoding="utf-8")
        (base / repo / "README.md").write_text("# App\n\nParses its config file.\n", encoding="utf-8")
    (base / "docs").mkdir()
    (base / "docs" / "guide.md").write_text("# Guide\n\n## Storage\n\nOne SQLite file.\n", encoding="utf-8")
    notes = [{"id": ANY_ID, "text": "Retry each call twice, then give up.", "kind": "decision"},
             {"id": "note-2", "title": "Deploys", "text": "Deploy billing after migration_032."}]
    (base / "notes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in notes), encoding="utf-8")
    try:  # docs/models.md's folders: tiny models built as tests/test_onnx_models.py builds them
        from test_onnx_models import cross_encoder, model_folder
    except (ImportError, pytest.skip.Exception):
        return base
    model_folder(base, "bge-small")
    cross_encoder(base, name="ms-marco")
    return base


@pytest.fixture
def folder(reader_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh copy of the reader's folder as the working directory, no user config."""
    work = tmp_path / "work"
    shutil.copytree(reader_folder, work)
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("HYBRIDKB_DB", "HYBRIDKB_EMBEDDER", "HYBRIDKB_CONFIG", "HYBRIDKB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield work


# -- shapes ---------------------------------------------------------------------------------

def decimals(number: str) -> int:
    return len(number.partition(".")[2])


def skeleton(text: str) -> str:
    """A string's form: each number one `9`, each other run of word characters one `w`
    ("[wiki: Storage]" -> "[w: w]"; a time with or without its fraction of a second alike)."""
    return re.sub(r"[^\W\d]\w*", "w", re.sub(r"\d+(?:\.\d+)?", "9", text))


def same_shape(shown: Any, actual: Any, where: str) -> None:
    """`actual` has the form of the value the docs show."""
    if isinstance(shown, tuple):  # `a, b  # 0.83, "[wiki: Storage]"`: one value each
        assert isinstance(actual, tuple) and len(actual) == len(shown), \
            f"{where}: shows {shown!r}, the code gives {actual!r}"
        for s, a in zip(shown, actual, strict=True):
            same_shape(s, a, where)
    elif isinstance(shown, list):  # a list of any length, each entry shaped like the first shown
        assert isinstance(actual, list), f"{where}: shows a list, the code gives {actual!r}"
        for a in actual[: 1 if shown else 0]:
            same_shape(shown[0], a, f"{where}[0]")
    elif isinstance(shown, dict):
        assert isinstance(actual, dict), f"{where}: shows an object, the code gives {actual!r}"
        assert set(shown) == set(actual), \
            f"{where}: shows fields {sorted(shown)}, the code gives {sorted(actual)}"
        for key, value in shown.items():
            same_shape(value, actual[key], f"{where}.{key}")
    elif isinstance(shown, bool) or shown is None:
        assert actual is None or shown is None or isinstance(actual, bool), f"{where}: {actual!r}"
    elif isinstance(shown, int | float):
        assert isinstance(actual, int | float) and not isinstance(actual, bool), \
            f"{where}: shows a number, the code gives {actual!r}"
    elif isinstance(shown, str):
        assert isinstance(actual, str), f"{where}: shows a string, the code gives {actual!r}"
        if not shown.endswith("..."):  # an elided value ("9f2c...") shows only that it is a string
            assert skeleton(shown) == skeleton(actual), \
                f"{where}: shows {shown!r}, the code gives {actual!r}"


def shown_scores(source: str) -> list[tuple[str, str]]:
    """(name, number as written) for each score a snippet shows: `"score": 0.83` in JSON,
    or a number in the comment of a Python line that reads a `score`."""
    found = re.findall(r'"((?:final_)?score)":\s*(-?\d+\.\d+)', source)
    for line in source.splitlines():
        code, _, comment = line.partition("#")
        if "score" in code and comment:
            first_read = re.search(r"\bscore\b|\[\"score\"\]", code)
            numbers = re.findall(r"(?<![\w.])(\d+\.\d+)", comment)
            if first_read and numbers:
                found.append(("score", numbers[0]))
    return found


# -- Python blocks --------------------------------------------------------------------------

def needs_a_server(block: Block) -> bool:
    """A PostgreSQL URL in the code itself (not in a comment)."""
    tokens = tokenize.generate_tokens(io.StringIO(block.text).readline)
    return any(t.type == tokenize.STRING and SERVER.search(t.string) for t in tokens)


def comment_values(text: str) -> list[tuple[int, str, Any]]:
    """(line, expression, shown value) for each line `EXPRESSION  # LITERAL`."""
    out = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        row, col = token.start
        code = text.splitlines()[row - 1][:col].strip()
        try:
            ast.parse(code, mode="eval")
            shown = ast.literal_eval(token.string[1:].strip())
        except (SyntaxError, ValueError):
            continue
        out.append((row, code, shown))
    return out


def run_python(block: Block, namespace: dict[str, Any]) -> None:
    code = compile(block.text, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)  # the docs' own examples
    if inspect.iscoroutine(result):
        asyncio.run(result)


PYTHON_FILES = sorted({b.path for b in blocks("python") if not needs_a_server(b)})


def test_every_python_example_is_run_or_needs_a_server() -> None:
    left_out = [str(b) for b in blocks("python") if needs_a_server(b)]
    assert all(b.startswith("docs/postgres.md") for b in left_out), left_out
    assert len(PYTHON_FILES) >= 2  # README.md and docs/adapters.md at least


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_examples_run_and_show_what_the_code_gives(path: Path, folder: Path) -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    namespace: dict[str, Any] = {"__name__": "__doc_example__"}
    try:
        for block in blocks("python", [path]):
            if needs_a_server(block):
                continue
            run_python(block, namespace)
            for row, expression, shown in comment_values(block.text):
                actual = eval(expression, namespace)
                same_shape(shown, actual, f"{block} line {row}: {expression}")
            for name, number in shown_scores(block.text):
                assert decimals(number) == 2, f"{block}: write {name} {number} with 2 decimals"
    finally:
        for value in namespace.values():
            if isinstance(value, hybridkb.KnowledgeBase):
                value.close()


# -- the REST hit ---------------------------------------------------------------------------

def test_the_rest_hit_example_has_the_served_fields(folder: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from hybridkb.web import web_app

    (example,) = [b for b in blocks("json", [ROOT / "docs" / "rest.md"]) if '"explanation"' in b.text]
    shown = json.loads(example.text)
    with hybridkb.open("kb.db") as kb, TestClient(web_app(kb, token="t"),
                                                  base_url="http://127.0.0.1:8765") as client:
        answer = client.get("/api/search", params={"q": "connect storage path", "corpus": "code"},
                            headers={"Authorization": "Bearer t"})
        assert answer.status_code == 200, answer.text
        actual = answer.json()["hits"][0]
    shown_retrievers = shown["explanation"].pop("retrievers")
    actual_retrievers = actual["explanation"].pop("retrievers")
    same_shape(shown, actual, str(example))
    for name, entry in actual_retrievers.items():
        same_shape(shown_retrievers[name], entry, f"{example} retrievers.{name}")
    for name, number in shown_scores(example.text):
        assert decimals(number) == 2, f"{example}: write {name} {number} with 2 decimals"
    assert 0.0 <= actual["score"] <= 1.0


# -- CLI lines ------------------------------------------------------------------------------

def cli_lines(block: Block) -> list[str]:
    """The `hybridkb ...` commands and `export VAR=value` lines of a shell block, in order."""
    lines = []
    for raw in re.sub(r"\\\n\s*", " ", block.text).splitlines():
        for part in re.split(r"\s*(?:&&|;)\s*", raw.split(" #", 1)[0].strip()):
            part = re.sub(r"^\S*/bin/(?=hybridkb\b)", "", part)  # .venv/bin/hybridkb
            if part.startswith(("hybridkb ", "export HYBRIDKB_")):
                lines.append(part)
    return lines


def left_out(line: str) -> str | None:
    words = shlex.split(line)
    for key, why in NOT_RUN.items():
        if key in words or (key.endswith("//") and key in line):
            return why
    return None


def run_cli(line: str, env: dict[str, str]) -> Any:
    words = [ANY_ID if w == "ID" else w for w in shlex.split(line)]
    words = [w for w in words if not w.startswith(">")]
    return CliRunner().invoke(cli, words[1:], env=env, catch_exceptions=False)


SHELL_FILES = sorted({b.path for b in blocks("sh") if any(not left_out(x) for x in cli_lines(b))})


@pytest.mark.parametrize("path", SHELL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cli_examples_run(path: Path, folder: Path) -> None:
    env: dict[str, str] = {}
    ran = 0
    for block in blocks("sh", [path]):
        for line in cli_lines(block):
            if left_out(line):
                continue
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").partition("=")
                env[name] = value
                continue
            result = run_cli(line, env)
            assert result.exit_code == 0, f"{block}: `{line}` exited {result.exit_code}:\n{result.output}"
            if "--json" in line.split():
                assert isinstance(json.loads(result.stdout), dict), f"{block}: `{line}`"
            ran += 1
    assert ran, f"{path}: no CLI line ran"


def shown_outputs() -> list[tuple[Block, str, list[str]]]:
    """Blocks that show a command (`$ hybridkb ...`) and what it prints."""
    out = []
    for block in blocks(""):
        first, *rest = block.text.splitlines() or [""]
        if first.startswith("$ hybridkb "):
            out.append((block, first[2:], rest))
    return out


HIT_HEADER = re.compile(r"^\s*\d+\.\s+(\d+\.\d+)\b")


@pytest.mark.parametrize("shown", shown_outputs(), ids=lambda s: str(s[0]))
def test_shown_cli_output_has_the_form_the_cli_prints(shown: tuple[Block, str, list[str]],
                                                      folder: Path) -> None:
    block, line, lines = shown
    index = run_cli("hybridkb --db kb.db index ./repo --corpus repo", {})
    assert index.exit_code == 0, index.output
    result = run_cli(line, {"HYBRIDKB_DB": "kb.db"})
    assert result.exit_code == 0, result.output
    printed = result.stdout.splitlines()
    assert printed and skeleton(printed[0]) == skeleton(lines[0]), \
        f"{block}: shows {lines[0]!r}, the CLI prints {printed[:1]!r}"
    shown_headers = [m.group(1) for m in map(HIT_HEADER.match, lines) if m]
    printed_headers = [m.group(1) for m in map(HIT_HEADER.match, printed) if m]
    assert printed_headers, f"`{line}` printed no hit:\n{result.stdout}"
    assert {decimals(s) for s in shown_headers} == {decimals(p) for p in printed_headers}, \
        f"{block}: shows scores {shown_headers}, the CLI prints {printed_headers}"


# -- the embedder's names, said alike everywhere --------------------------------------------

def test_the_embedder_names_agree_in_errors_help_and_docs() -> None:
    from hybridkb.embedding import CHOICES, get_embedder
    from hybridkb.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as error:
        get_embedder("bge-small")
    help_text = CliRunner().invoke(cli, ["--help"]).output
    assert CHOICES in str(error.value)
    assert " ".join(CHOICES.split()) in " ".join(help_text.split())
    names = re.findall(r"\b(default|onnx:PATH|hashing-DIM|none)\b", CHOICES)
    assert names == ["default", "onnx:PATH", "hashing-DIM", "none"]
    for name in names:
        if name != "onnx:PATH":  # tests/test_onnx_models.py builds a folder for it
            get_embedder(name.replace("DIM", "64"))  # each name the message offers is accepted
    config_doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "embedder = \"default\"            # default, onnx:PATH, hashing-DIM, none" in config_doc
