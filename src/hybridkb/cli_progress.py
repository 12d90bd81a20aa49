"""Feedback on the CLI's long jobs (indexing, embedding, import, reembed, eval) and Ctrl-C.

On a terminal a tqdm bar, redrawn at least every second so its elapsed time, rate and ETA
move even while one batch takes long; elsewhere (a log, CI, a pipe) a line every
`HYBRIDKB_PROGRESS_EVERY` seconds (10) with the count, rate and ETA. HYBRIDKB_PROGRESS=0
silences both, =1 forces the bar. Ctrl-C sets a flag the work asks between its units and
says "stopping" at once; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

T = TypeVar("T")
EVERY_S = 10.0  # not on a terminal: a line this often
REDRAW_S = 1.0  # on a terminal: the bar is redrawn at least this often


def _mode() -> str:
    chosen = os.environ.get("HYBRIDKB_PROGRESS", "")
    if chosen == "0":
        return "off"
    return "bar" if chosen == "1" or sys.stderr.isatty() else "lines"


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


class Lines:
    """A progress report for a log: `embedding: 366/1,134 chunks (32%), 12.3/s, ETA 1m02s`
    every `every` seconds from a thread of its own (so a long batch still gets its line)."""

    def __init__(self, total: int | None, desc: str, unit: str, every: float) -> None:
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.n = 0
        self.started = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hybridkb-progress", daemon=True)

    def update(self, n: int = 1) -> None:
        self.n += n

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.n / elapsed
        count = f"{self.n:,}/{self.total:,} {self.unit}s ({100 * self.n // max(self.total, 1)}%)" \
            if self.total else f"{self.n:,} {self.unit}s"
        eta = ""
        if self.total and rate > 0:
            eta = f", ETA {_duration((self.total - self.n) / rate)}"
        return f"{self.desc}: {count}, {rate:,.1f}/s, {_duration(elapsed)} so far{eta}"

    def _run(self) -> None:
        while not self._done.wait(self.every):
            click.echo(self.line(), err=True)

    def __enter__(self) -> Lines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


@contextmanager
def progress_bar(total: int | None, desc: str, unit: str = "item") -> Iterator[Any]:
    """The feedback for one long job: `bar.update(n)` as work is done."""
    mode = _mode()
    if mode == "lines":
        every = float(os.environ.get("HYBRIDKB_PROGRESS_EVERY") or EVERY_S)
        with Lines(total, desc, unit, every) as lines:
            yield lines
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, smoothing=0.1,
              disable=mode == "off") as bar:
        done = threading.Event()

        def redraw() -> None:
            while not done.wait(REDRAW_S):
                bar.refresh()

        if mode == "bar":
            threading.Thread(target=redraw, name="hybridkb-progress", daemon=True).start()
        try:
            yield bar
        finally:
            done.set()


@contextmanager
def ctrl_c_stops(on_stop: Callable[[], None] | None = None,
                 message: str = "stopping after the batch in hand") -> Iterator[Callable[[], bool]]:
    """Ctrl-C asks the work to stop at its next file or batch and says so at once (`on_stop`
    also runs then, e.g. to interrupt a model mid-batch); a second Ctrl-C stops at once.

    A KeyboardInterrupt raised inside a database call would be reported as a failed write
    (SQLite turns an exception in a Python function it calls into an error); a flag asked
    between units of work keeps the interrupt clean.
    """
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return

    def handler(signum: int, frame: object) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()
        below = "\n" if sys.stderr.isatty() else ""  # under the bar, not on it
        click.echo(f"{below}{message} (Ctrl-C again to quit at once)...", err=True)
        if on_stop is not None:
            on_stop()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def on_worker(work: Callable[[], T]) -> T:
    """`work()` run on a worker thread while this thread waits: Python runs signal handlers on
    the main thread only, between its own steps, so a main thread waiting here takes Ctrl-C
    at once, where one inside a model's run would take it only when the run ends."""
    result: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the waiting thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="hybridkb-work", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    if failed:
        raise failed[0]
    return result[0]
