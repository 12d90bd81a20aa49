"""Locating a hit: snippet selection and highlighting (pure), and how the CLI and API show it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import hybridkb
from hybridkb import HashingEmbedder, KnowledgeBase
from hybridkb.cli import cli
from hybridkb.ingest import index_folder
from hybridkb.snippets import best_lines, highlight, query_terms, snippet

CODE = "\n".join([
    "import os",  # 10
    "",
    "def load(path):",  # 12
    "    return open(path).read()",
    "",
    "def parse_config(text):",  # 15
    "    '''Parse the config file.'''",
    "    config = {}",
    "    for line in text.splitlines():",
    "        key, _, value = line.partition('=')",
    "        config[key] = value",
    "    return config",  # 21
    "",
    "def save(path, data):",
    "    open(path, 'w').write(data)",
])


def test_query_terms_leave_stopwords_out_unless_nothing_else_is_left() -> None:
    assert query_terms("where do we keep the data?") == ["data", "keep"]
    assert query_terms("to be or not to be") == ["not", "be", "or", "to"]
    assert "«the»" not in highlight("the data is kept here", query_terms("where is the data"))
    assert highlight("the data", query_terms("the data")) == "the «data»"


def test_query_terms_drop_one_letter_words_and_put_longer_terms_first() -> None:
    assert query_terms("parse a Config, config 7") == ["config", "parse", "7"]
    assert query_terms("parse_config") == ["config", "parse"]


def test_highlight_marks_the_matching_prefix_of_words() -> None:
    terms = query_terms("config migrat")
    assert highlight("Config in migration_032", terms) == "«Config» in «migrat»ion_032"
    assert highlight("config", terms, ansi=True) == "\x1b[1mconfig\x1b[0m"
    assert highlight("nothing here", terms) == "nothing here"


def test_best_lines_centre_on_the_lines_with_the_most_terms() -> None:
    shown = best_lines(CODE, "parse config text", first_line=10, max_lines=5)
    assert shown.best == 15  # `def parse_config(text):` holds all three terms
    assert (shown.first, shown.last) == (13, 17)  # centred on it
    assert shown.lines[2] == "def parse_config(text):"
    top = best_lines(CODE, "config value", first_line=10, max_lines=3)
    assert (top.best, top.first, top.last) == (20, 19, 21)


def test_best_lines_without_a_match_start_at_the_first_text_line() -> None:
    shown = best_lines("\n\nfirst\nsecond\n", "absent", first_line=3)
    assert (shown.first, shown.best, shown.lines[0]) == (5, 5, "first")


def test_best_lines_cut_a_long_line_around_its_match() -> None:
    line = "x" * 300 + " needle " + "y" * 300
    shown = best_lines(line, "needle", max_width=80)
    assert len(shown.lines[0]) <= 82 and "needle" in shown.lines[0]
    assert shown.lines[0].startswith("…") and shown.lines[0].endswith("…")


def test_snippet_window_holds_the_most_terms() -> None:
    text = "intro " * 100 + "the migration_032 moved the data " + "outro " * 100
    cut = snippet(text, "migration data", width=60)
    assert "migration_032" in cut and "data" in cut and cut.startswith("…") and cut.endswith("…")
    assert snippet("short text", "x") == "short text"


def _indexed(tmp_path: Path, base_url: str | None = None) -> tuple[Path, Path]:
    root, db = tmp_path / "r", tmp_path / "kb.db"
    (root / "src").mkdir(parents=True)
    (root / "src" / "conf.py").write_text("\n" * 9 + CODE + "\n")
    kb = hybridkb.open(db, embedder=HashingEmbedder(64))
    index_folder(kb, root, "repo", base_url=base_url)
    kb.close()
    return root, db


def test_hits_from_files_carry_path_and_lines(kb: KnowledgeBase, tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "conf.py").write_text("\n" * 9 + CODE + "\n")
    index_folder(kb, tmp_path / "r", "repo", base_url="https://example.com/blob/main/")
    hit = kb.search("parse_config", mode="fts", limit=1).hits[0]
    assert (hit.path, hit.start_line, hit.end_line) == ("conf.py", 15, 21)
    assert hit.source_url == "https://example.com/blob/main/conf.py#L15-L21"
    data = hit.to_dict()
    assert (data["path"], data["start_line"], data["end_line"]) == ("conf.py", 15, 21)
    kb.add("a note, not a file", id="note")
    note = kb.search("note", mode="fts").hits[0]
    assert note.path is None and note.start_line is None and "path" not in note.to_dict()


def test_cli_search_prints_path_line_and_marked_lines(tmp_path: Path, monkeypatch: object) -> None:
    root, db = _indexed(tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(db), "--embedder", "hashing-64", "search", "parse config",
                                      "--limit", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    head = next(line for line in lines if ".py:" in line)  # `  1. 0.950  path:line  › symbol`
    where = head.split()[2]
    assert len(head) < 100 and where.endswith("src/conf.py:15") and Path(where.rsplit(":", 1)[0]).resolve() == (
        root / "src" / "conf.py").resolve()
    assert "      15 │ def «parse»_«config»(text):" in lines
    assert "      16 │     \'\'\'«Parse» the «config» file.\'\'\'" in lines
    assert "\x1b[" not in result.stdout  # not a terminal: plain markers
    data = json.loads(CliRunner().invoke(cli, ["--db", str(db), "--embedder", "hashing-64", "--json",
                                               "search", "parse config", "--limit", "1"]).stdout)
    assert (data["hits"][0]["path"], data["hits"][0]["start_line"]) == ("src/conf.py", 15)
