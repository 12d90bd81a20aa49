"""Feedback on long jobs: a line every few seconds off a terminal, Ctrl-C acted on at once with a
true count of what waits (a real `hybridkb index` process, the real default model)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import hybridkb
from hybridkb.cli_progress import Lines, _duration, progress_bar

SRC = str(Path(__file__).resolve().parent.parent / "src")


def test_lines_report_count_rate_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    with Lines(200, "embedding", "chunk", every=0.05) as lines:
        lines.update(50)
        time.sleep(0.3)
    said = capsys.readouterr().err.splitlines()
    assert said and all(line.startswith("embedding: 50/200 chunks (25%), ") for line in said), said
    assert "/s, " in said[-1] and "so far, ETA " in said[-1]
    assert (_duration(5.2), _duration(75), _duration(7300)) == ("5s", "1m15s", "2h01m")


def test_progress_off_a_terminal_is_lines_and_zero_silences_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYBRIDKB_PROGRESS", raising=False)
    with progress_bar(10, "importing") as bar:
        assert isinstance(bar, Lines)  # pytest's stderr is no terminal
    monkeypatch.setenv("HYBRIDKB_PROGRESS", "0")
    with progress_bar(10, "importing") as bar:
        assert not isinstance(bar, Lines) and bar.disable


def _tree(root: Path, files: int = 8) -> None:
    root.mkdir()
    words = "request response handler compute headers cache session token parse retry budget".split()
    for f in range(files):
        functions = []
        for fn in range(6):
            body = "\n".join(f"    {words[(i + fn) % 11]}_{i} = {words[(i * 3 + f) % 11]}("
                             f"{words[(i + 5) % 11]}, {words[(i * 7) % 11]}={i})  # {' '.join(words)}"
                             for i in range(28))
            functions.append(f"def function_{f}_{fn}(request, response):\n{body}\n    return response\n")
        (root / f"mod{f}.py").write_text("\n\n".join(functions))


def _read_lines(stream: object, out: queue.Queue[tuple[float, str | None]]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put((time.monotonic(), line.rstrip("\n")))
    out.put((time.monotonic(), None))  # the end


def test_ctrl_c_during_embedding_stops_within_a_second(tmp_path: Path) -> None:
    """SIGINT while the model is in the middle of a batch: "stopping" within a second, the
    process gone soon after, exit 130, and the count it gives is what the store holds."""
    _tree(tmp_path / "tree")
    db = tmp_path / "kb.db"
    env = {**os.environ, "PYTHONPATH": SRC, "HYBRIDKB_PROGRESS": "", "HYBRIDKB_PROGRESS_EVERY": "0.5"}
    proc = subprocess.Popen([sys.executable, "-c", "from hybridkb.cli import main; main()", "--db", str(db),
                             "index", str(tmp_path / "tree"), "--corpus", "t"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    said: queue.Queue[tuple[float, str | None]] = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stderr, said), daemon=True).start()
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # two progress lines: the model is loaded and running
        _, line = said.get(timeout=120)
        assert line is not None, lines
        lines.append(line)
        if sum(x.startswith("embedding: ") for x in lines) >= 2:
            break
    assert "so far" in lines[-1] and " chunks (" in lines[-1], lines
    queued = int(lines[-1].split("/")[1].split(" ")[0].replace(",", ""))
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stopping_at = None
    while True:
        at, line = said.get(timeout=30)
        if line is None:
            break
        lines.append(line)
        if line.startswith("stopping") and stopping_at is None:
            stopping_at = at - sent
    proc.wait(timeout=30)
    gone = time.monotonic() - sent
    assert proc.returncode == 130, lines
    assert stopping_at is not None and stopping_at < 1.0, (stopping_at, lines)
    assert gone < 3.0, (gone, lines)  # the run in hand ended, the store closed
    stopped = next(x for x in lines if x.startswith("stopped: embedded "))
    done, total = (int(n) for n in stopped.split("embedded ")[1].split(" chunks")[0].split(" of "))
    with hybridkb.open(db, embedder="default") as kb:
        waiting = kb.awaiting_embedding()
    assert total == queued and done + waiting == total and waiting > 0
    assert (f"{waiting} wait in the store" in stopped) if waiting else stopped.endswith("none waits")


def test_import_off_a_terminal_says_count_rate_and_eta(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from hybridkb.cli import cli

    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps({"id": f"n{i}", "text": f"note {i} about queue {i % 97}"}) + "\n"
                              for i in range(4000)))
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "kb.db"), "--embedder", "hashing-64",
                                      "import", str(source)],
                                env={"HYBRIDKB_PROGRESS": "", "HYBRIDKB_PROGRESS_EVERY": "0.02"})
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stderr.splitlines() if x.startswith("importing: ")]
    assert lines and all("/4,000 items (" in x and "/s, " in x for x in lines), result.stderr
    assert any("ETA" in x for x in lines)


def test_a_terminal_bar_is_redrawn_while_a_batch_takes_long(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """No update for 2.5 s (one slow batch): the bar is still redrawn every second, so its
    elapsed time and rate move."""
    monkeypatch.setenv("HYBRIDKB_PROGRESS", "1")  # the bar, as on a terminal
    with progress_bar(100, "embedding", "chunk") as bar:
        bar.update(16)
        capsys.readouterr()
        time.sleep(2.5)
        drawn = capsys.readouterr().err
    frames = [f for f in drawn.split("\r") if "embedding" in f]
    assert len(frames) >= 2 and all("16/100" in f for f in frames), drawn
    assert len({f.split("[")[1].split("<")[0] for f in frames}) >= 2  # the elapsed time moved
