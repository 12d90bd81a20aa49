"""CLI conventions: global options anywhere, read commands never create a store, the config
file and its precedence (flag > env > file), shell completion scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import hybridkb
from hybridkb.cli import cli
from hybridkb.config import Config, find_config, load_config, parse_config
from hybridkb.errors import InvalidInputError


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder, as a new user would."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, prog_name="hybridkb")


def seed(db: Path) -> None:
    with hybridkb.open(db, embedder=None) as kb:
        kb.add("Run migration_032 before deploying", id="m1", corpus="ops")
        kb.add("Deploy notes for the wiki", id="w1", corpus="wiki")


# -- global options before or after the command -----------------------------------------------

@pytest.mark.parametrize("args", [
    ["--db", "{db}", "--no-embedder", "--json", "search", "migration_032"],
    ["search", "migration_032", "--db", "{db}", "--no-embedder", "--json"],
    ["--db", "{db}", "search", "--json", "migration_032", "--no-embedder"],
    ["--json", "search", "migration_032", "--db", "{db}", "--embedder", "none"],
])
def test_global_options_before_or_after_the_command(here: Path, args: list[str]) -> None:
    db = here / "kb.db"
    seed(db)
    result = invoke(*[a.replace("{db}", str(db)) for a in args])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [h["id"] for h in out["hits"]] == ["m1"] and out["answered_by"] == "fts"
    assert not (here / "hybridkb.db").exists()


def test_the_option_after_the_command_wins(here: Path) -> None:
    seed(here / "a.db")
    seed(here / "b.db")
    with hybridkb.open(here / "b.db", embedder=None) as kb:
        kb.add("only in b", id="b-only")
    out = invoke("--db", str(here / "a.db"), "--no-embedder", "stats", "--json", "--db", str(here / "b.db"))
    assert json.loads(out.stdout)["items"] == 3


def test_every_command_accepts_the_global_options() -> None:
    assert isinstance(cli, click.Group)
    for name, command in cli.commands.items():
        opts = {o for p in command.params for o in getattr(p, "opts", ())}
        assert {"--db", "--json"} <= opts, name
        if name != "eval":  # eval has its own --db (where to index) and loads models itself
            assert {"--embedder", "--no-embedder"} <= opts, name


# -- read commands never create a store ---------------------------------------------------------

@pytest.mark.parametrize("args", [["search", "x"], ["get", "x"], ["stats"], ["export"], ["delete", "x"],
                                  ["purge"], ["reembed"], ["check"], ["serve", "--read-only"],
                                  ["migrate", "--to", "other.db"]])
def test_read_commands_never_create_a_store(here: Path, args: list[str]) -> None:
    result = invoke("--no-embedder", *args)
    assert result.exit_code != 0
    assert "no store at 'hybridkb.db'; create one with `hybridkb init` or any write" in result.stderr
    assert "Traceback" not in result.output
    assert list(here.iterdir()) == []


def test_a_write_creates_the_store(here: Path) -> None:
    assert invoke("--no-embedder", "add", "first note").exit_code == 0
    assert (here / "hybridkb.db").exists()
    assert json.loads(invoke("--no-embedder", "--json", "stats").stdout)["items"] == 1


# -- the config file ----------------------------------------------------------------------------

def test_config_in_the_folder_sets_store_embedder_and_corpora(here: Path) -> None:
    seed(here / "notes.db")
    (here / "hybridkb.toml").write_text('db = "notes.db"\nembedder = "none"\ncorpora = ["wiki"]\n')
    out = json.loads(invoke("--json", "search", "deploy").stdout)
    assert [h["id"] for h in out["hits"]] == ["w1"]  # only the configured corpus
    out = json.loads(invoke("--json", "search", "deploy", "--corpus", "ops").stdout)
    assert [h["id"] for h in out["hits"]] == ["m1"]  # a flag beats the file
    stats = json.loads(invoke("--json", "stats").stdout)
    assert stats["target"] == str(here / "notes.db") and stats["embedder"] is None


def test_precedence_flag_then_env_then_file(here: Path) -> None:
    for name in ("file", "env", "flag"):
        with hybridkb.open(here / f"{name}.db", embedder=None) as kb:
            kb.add(f"store {name}", id=name)
    (here / "hybridkb.toml").write_text('db = "file.db"\nembedder = "none"\n')

    def which(*args: str, env: dict[str, str] | None = None) -> list[str]:
        result = invoke("--json", "search", "store", *args, env=env)
        assert result.exit_code == 0, result.output
        return [h["id"] for h in json.loads(result.stdout)["hits"]]

    assert which() == ["file"]
    assert which(env={"HYBRIDKB_DB": str(here / "env.db")}) == ["env"]
    assert which("--db", str(here / "flag.db"), env={"HYBRIDKB_DB": str(here / "env.db")}) == ["flag"]


def test_user_config_folder_and_explicit_config(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = here / "xdg"
    (xdg / "hybridkb").mkdir(parents=True)
    user_file = xdg / "hybridkb" / "hybridkb.toml"
    user_file.write_text('db = "mine.db"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    work = here / "work"
    work.mkdir()
    assert find_config(cwd=work) == user_file
    assert load_config().db == str(xdg / "hybridkb" / "mine.db")  # relative to the file's folder
    (work / "hybridkb.toml").write_text('db = "local.db"\n')
    assert find_config(cwd=work) == work / "hybridkb.toml"  # the folder's file comes first
    other = here / "other.toml"
    other.write_text('db = "postgresql://u@h/db"\n')
    assert load_config(str(other)).db == "postgresql://u@h/db"
    monkeypatch.setenv("HYBRIDKB_CONFIG", str(other))
    assert load_config().path == other


def test_serve_options_become_command_defaults() -> None:
    config = parse_config('[serve]\nhttp = true\nport = 9001\nread_only = true\ncorpora = ["a", "b"]\n',
                          Path("/x/hybridkb.toml"))
    assert config.default_map() == {"serve": {"use_http": True, "port": 9001, "read_only": True,
                                              "corpora_csv": "a,b"}}
    assert Config().default_map() == {}


@pytest.mark.parametrize("text, needle", [
    ("db = ", "not valid TOML"),
    ('colour = "red"', "unknown setting(s) colour"),
    ("db = 3", "db must be a str"),
    ('corpora = "wiki"', "corpora must be a list"),
    ("corpora = [1]", "list of corpus names"),
    ("[serve]\nport = 70000", "port must be 1 to 65535"),
    ('[serve]\nport = "80"', "port must be a int"),
    ("[serve]\nwho = 1", "[serve]: unknown setting(s) who"),
])
def test_bad_config_is_one_clear_error(here: Path, text: str, needle: str) -> None:
    with pytest.raises(InvalidInputError, match="config"):
        parse_config(text, here / "hybridkb.toml")
    (here / "hybridkb.toml").write_text(text)
    result = invoke("stats")
    assert result.exit_code == 1 and needle in result.stderr and "hybridkb.toml" in result.stderr
    assert "Traceback" not in result.output


def test_missing_explicit_config_is_an_error(here: Path) -> None:
    result = invoke("--config", "nope.toml", "stats")
    assert result.exit_code == 1 and "no config file at 'nope.toml'" in result.stderr


# -- version and completion ---------------------------------------------------------------------

def test_version_flag_reports_the_package_version() -> None:
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"hybridkb, version {version('hybridkb')}"


@pytest.mark.parametrize("shell, marker", [
    ("bash", "_hybridkb_completion()"),
    ("zsh", "#compdef hybridkb"),
    ("fish", "complete --no-files --command hybridkb"),
])
def test_completion_script_is_produced(shell: str, marker: str) -> None:
    env = {**os.environ, "_HYBRIDKB_COMPLETE": f"{shell}_source"}
    out = subprocess.run([sys.executable, "-c", "from hybridkb.cli import main; main()"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert marker in out.stdout and "_HYBRIDKB_COMPLETE" in out.stdout


def test_completion_completes_commands_and_options() -> None:
    env = {"_HYBRIDKB_COMPLETE": "bash_complete", "COMP_WORDS": "hybridkb sea", "COMP_CWORD": "1"}
    result = invoke(env=env)
    assert "plain,search" in result.stdout.splitlines()
    env = {"_HYBRIDKB_COMPLETE": "bash_complete", "COMP_WORDS": "hybridkb search x --no-e",
           "COMP_CWORD": "3"}
    assert "plain,--no-embedder" in invoke(env=env).stdout.splitlines()
