"""The command line through click's runner, on real store files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybridkb.cli import cli


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    db = str(tmp_path / "cli.db")
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True):  # type: ignore[no-untyped-def]
        result = runner.invoke(cli, ["--db", db, "--embedder", "hashing-64", *args])
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def test_add_search_get_delete(run) -> None:  # type: ignore[no-untyped-def]
    run("add", "Run migration_032 before deploying", "--id", "m1", "--kind", "decision")
    run("add", "We keep data in one SQLite file", "--id", "m2", "--metadata", '{"team": "core"}')
    out = json.loads(run("--json", "search", "migration_032", "--mode", "fts").stdout)
    assert out["answered_by"] == "fts"
    assert [h["id"] for h in out["hits"]] == ["m1"]
    human = run("search", "migration_032", "--explain").output
    assert "m1" in human and "fts #1" in human and "answered by: hybrid" in human
    got = json.loads(run("--json", "get", "m2").stdout)
    assert got["metadata"] == {"team": "core"} and got["text"].startswith("We keep")
    assert json.loads(run("--json", "delete", "m1").stdout) == {"deleted": 1}
    assert run("delete", "m1", ok=False).exit_code == 1


def test_stats_and_filters(run) -> None:  # type: ignore[no-untyped-def]
    run("add", "alpha note", "--corpus", "a", "--kind", "lesson")
    run("add", "alpha other", "--corpus", "b")
    stats = json.loads(run("--json", "stats").stdout)
    assert stats["items"] == 2 and stats["corpora"] == {"a": 1, "b": 1}
    out = json.loads(run("--json", "search", "alpha", "--kind", "lesson").stdout)
    assert [h["corpus"] for h in out["hits"]] == ["a"]
    out = json.loads(run("--json", "search", "alpha", "--corpus", "b").stdout)
    assert [h["corpus"] for h in out["hits"]] == ["b"]


def test_import_jsonl_and_beir_ids(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "items.jsonl"
    lines = [{"_id": "d1", "title": "T1", "text": "first document"},
             {"id": "d2", "text": "second document", "kind": "lesson", "metadata": {"x": 1}}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = json.loads(run("--json", "import", str(path)).stdout)
    assert {k: out[k] for k in ("imported", "skipped", "embedded", "awaiting_embedding")} == {
        "imported": 2, "skipped": 0, "embedded": 2, "awaiting_embedding": 0}
    assert json.loads(run("--json", "get", "d1").stdout)["title"] == "T1"


def test_import_bad_lines_all_or_nothing_or_skip(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"id": "ok", "text": "fine"}\n{not json\n{"id": "e", "text": ""}\n\xff\xfe\n')
    result = run("import", str(path), ok=False)
    assert result.exit_code == 1 and "error:" in result.output and "Traceback" not in result.output
    assert json.loads(run("--json", "stats").stdout)["items"] == 0
    out = json.loads(run("--json", "import", str(path), "--skip-bad").stdout)
    assert (out["imported"], out["skipped"], out["embedded"]) == (1, 3, 1)


@pytest.mark.parametrize(("args", "message"), [
    (["get", "missing"], "error: no item with id 'missing'"),
    (["search", "x", "--filter", "{bad"], "error: --filter is not valid JSON"),
    (["search", "x", "--filter", "[1]"], "error: --filter must be a JSON object"),
    (["search", "x", "--filter", '{"colour": 1}'], "error: unknown filter field 'colour'"),
    (["add", "x", "--metadata", "[1]"], "error: --metadata must be a JSON object"),
    (["add", "   "], "error: item '   ': text must be a non-empty string"),
    (["search", "x", "--corpus", "nope"], "error: unknown corpus 'nope'; known: default"),
])
def test_errors_are_one_line(run, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    run("add", "something", "--id", "s")
    result = run(*args, ok=False)
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr


def test_hostile_query_cli(run) -> None:  # type: ignore[no-untyped-def]
    run("add", "something", "--id", "s1")
    for q in ['"', "NEAR(", "-x", "a:b", "C++", ""]:
        out = json.loads(run("--json", "search", "--", q).stdout)
        assert out["query"] == q and out["mode"] == "hybrid"
        assert out["answered_by"] in ("hybrid", "fts", "vector", "substring", "none")
        assert {h["id"] for h in out["hits"]} <= {"s1"}
    assert json.loads(run("--json", "search", "--", "").stdout)["answered_by"] == "none"


def test_init_stats_purge_reembed_print_what_they_did(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "cli.db")
    assert run("init").output.strip() == f"store ready: {db}"
    run("add", "short lived", "--id", "t", "--ttl", "0.001", "--corpus", "tmp")
    run("add", "kept for good", "--id", "k", "--corpus", "main")
    human = run("stats").output.splitlines()
    assert human[:4] == [f"store:    {db}", "items:    2", "embedder: hashing-64@1 (64 dims)",
                         "without vectors: 0"]
    assert sorted(human[4:]) == ["  main: 1", "  tmp: 1"]
    time.sleep(0.01)
    assert run("purge").output.strip() == "purged 1 expired items"
    assert json.loads(run("--json", "purge").stdout) == {"purged": 0}
    assert run("reembed").output.strip().splitlines()[-1] == "embedded 0 items with hashing-64@1"


def test_demo_on_fts_only_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "d.db"), "--no-embedder", "--json",
                                      "demo", "where do we keep data?"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.splitlines()[-1])
    assert out["answered_by"] == "fts" and out["hits"]


def test_every_command_has_help() -> None:
    for name, command in cli.commands.items():
        assert command.help, f"command {name} has no help"
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: cli {name} ") or \
            result.output.startswith(f"Usage: cli {name}\n"), result.output
        first = command.help.strip().splitlines()[0]
        assert " ".join(first.split()[:4]) in " ".join(result.output.split()), (name, first)


def test_hit_headers_fit_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hit's first line is under 100 columns: `path:line` once (no label or id repeating
    it) and the heading or symbol, cut when long; other items show label and id."""
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "npmdocs" / "using-npm"
    docs.mkdir(parents=True)
    heading = "Publishing public scoped packages to the public npm registry and what it costs"
    (docs / "scope.md").write_text(f"# Scoped packages\n\n## Publishing scoped packages\n\n### {heading}\n\n"
                                   "To publish a public scoped package, run npm publish --access public.\n")
    db = str(tmp_path / "kb.db")
    run = CliRunner().invoke
    assert run(cli, ["--db", db, "--embedder", "hashing-64", "index", str(tmp_path / "npmdocs"),
                     "--corpus", "npmdocs"]).exit_code == 0
    assert run(cli, ["--db", db, "--embedder", "hashing-64", "add", "publish scoped packages as a decision",
                     "--kind", "decision", "--id", "d-" + "x" * 120]).exit_code == 0
    out = run(cli, ["--db", db, "--embedder", "hashing-64", "search", "publish scoped package"])
    assert out.exit_code == 0, out.output
    heads = [line for line in out.stdout.splitlines() if line[:5].strip().rstrip(".").isdigit()]
    assert len(heads) >= 2 and all(len(h) < 100 for h in heads), heads
    file_head = next(h for h in heads if "scope.md:" in h)
    assert file_head.count("scope.md") == 1 and "npmdocs:" not in file_head and "[doc:" not in file_head
    assert "› … > Publishing public scoped packages" in file_head and file_head.endswith("…")
    memo = next(h for h in heads if "[memory: decision]" in h)
    assert "(d-xxxx" in memo and memo.endswith("…")


@pytest.mark.parametrize(("args", "kind", "code"), [
    (["--json", "get", "missing"], "NotFoundError", 1),
    (["search", "x", "--corpus", "nope", "--json"], "NotFoundError", 1),
    (["search", "x", "--language", "pyhton", "--json"], None, 0),  # no language stored: no typo
    (["--json", "search", "x", "--filter", "{bad"], "InvalidInputError", 1),
    (["search", "x", "--json", "--mode", "psychic"], "BadParameter", 2),
    (["--json", "search"], "MissingParameter", 2),
    (["--json", "nosuch"], "NoSuchCommand", 2),
    (["--json", "stats", "--db", "MISSING"], "NotFoundError", 1),
    (["--json", "index", "/no/such/folder", "--corpus", "c"], "BadParameter", 2),
    (["--json", "--no-embedder", "embed"], "UsageError", 2),
    (["eval", "--json", "--dataset", "/no/such/set"], "BadParameter", 2),
    (["--json", "add", "   "], "InvalidInputError", 1),
    (["stats", "--json", "--config", "BAD"], "InvalidInputError", 1),
])
def test_json_errors_are_one_object_on_stdout(run, tmp_path: Path, args: list[str], kind: str | None,
                                              code: int) -> None:  # type: ignore[no-untyped-def]
    """Under --json (before or after the command) every error, the library's and click's,
    is one JSON object on stdout with a non-zero exit and nothing on stderr."""
    run("add", "something", "--id", "s")
    (tmp_path / "bad.toml").write_text("colour = 1\n")
    args = [str(tmp_path / "missing.db") if a == "MISSING" else str(tmp_path / "bad.toml") if a == "BAD"
            else a for a in args]
    if "--config" in args:  # a group option: it goes before the command
        at = args.index("--config")
        args = [args[at], args[at + 1], *args[:at], *args[at + 2:]]
    result = run(*args, ok=False)
    assert result.exit_code == code, result.output
    out = json.loads(result.stdout)
    assert isinstance(out, dict) and result.stderr == ""
    if kind is not None:
        assert out["type"] == kind and out["error"], out
