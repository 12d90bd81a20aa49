"""Word prints computed in a second process, so a large `add_many` uses a second core.

Every item is written with its word print (dedup.word_print: the hash of its sorted word
set, what a search's near-duplicate collapse compares). In Python that is 55-90 us an item,
a quarter of a bulk add's time on the writing thread, and threads cannot share it (the work
holds the GIL). So a large load hands each batch's texts to this worker while it writes the
batch before (batches.py): `python -m hybridkb.print_worker`, reading frames from its
stdin and answering on its stdout. A frame is an 8-byte little-endian length and then a
pickled list of texts (pickle keeps lone surrogates, which word_print accepts) or the
prints as little-endian int64.

The worker is an optimization, never a dependency: if it cannot start, dies, answers late
(TIMEOUT_S) or wrongly, `collect()` says None and the caller computes the prints itself.
Pickles are only ever read from the parent that started the process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import struct
import subprocess
import sys
import time
from array import array
from pathlib import Path
from typing import BinaryIO

_LENGTH = struct.Struct("<Q")
TIMEOUT_S = 60.0  # for an answer (the first one includes the worker's import, ~0.3 s)
# The worker wants a core beside the writing thread. On 2 cores, shared with the text
# index's indexing thread, it still takes 42 of the writing thread's ~155 us an item for
# ~8 us more CPU in all (50,000 items, 2026-11-29, load 8: 619-635 against 679-694 us an
# item). On one core it could only take time from the writer.
MIN_CPUS = 2
# A batch's texts in one write (256 benchmark texts pickle to ~380 KB): through the default
# 64 KiB pipe they went in six writes, each waiting for the worker to read the last.
PIPE_BYTES = 1 << 20


def available() -> bool:
    """Whether a worker can be started here and has a core of its own to run on (POSIX
    pipes with select, a Python to run)."""
    return os.name == "posix" and bool(sys.executable) and _cpus() >= MIN_CPUS


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every POSIX system
        return os.cpu_count() or 1


class PrintWorker:
    """One worker process; one batch in flight at a time (`submit`, then `collect`)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._expected = 0  # prints awaited from the last submit
        self._failed = False
        try:
            package_root = str(Path(__file__).resolve().parent.parent)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hybridkb.print_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            assert self._proc.stdin is not None and self._proc.stdout is not None
            os.set_blocking(self._proc.stdin.fileno(), False)
            with contextlib.suppress(ImportError, OSError, AttributeError):  # a default pipe works
                import fcntl  # F_SETPIPE_SZ: Linux's

                fcntl.fcntl(self._proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except (OSError, ValueError):
            self._failed = True

    @property
    def failed(self) -> bool:
        return self._failed

    def submit(self, texts: list[str]) -> None:
        """Send a batch's texts; the worker computes while the caller goes on."""
        self._expected = len(texts)
        if self._failed or self._proc is None or self._proc.stdin is None:
            return
        payload = pickle.dumps(texts, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._send(_LENGTH.pack(len(payload)) + payload, time.monotonic() + TIMEOUT_S)
        except (OSError, TimeoutError):
            self._fail()

    def collect(self) -> list[int] | None:
        """The prints of the last submitted batch, in order; None when the worker failed."""
        if self._failed or self._proc is None or self._proc.stdout is None:
            return None
        deadline = time.monotonic() + TIMEOUT_S
        try:
            (size,) = _LENGTH.unpack(self._receive(_LENGTH.size, deadline))
            if size != 8 * self._expected:
                raise OSError(f"print worker answered {size} bytes for {self._expected} texts")
            prints = array("q")
            prints.frombytes(self._receive(size, deadline))
        except (OSError, TimeoutError, struct.error):
            self._fail()
            return None
        if sys.byteorder != "little":
            prints.byteswap()
        return prints.tolist()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()  # EOF: the worker's loop ends
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def _fail(self) -> None:
        self._failed = True
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
        self.close()

    def _send(self, data: bytes, deadline: float) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        fd, view = self._proc.stdin.fileno(), memoryview(data)
        while view:
            if not select.select([], [fd], [], _left(deadline))[1]:
                raise TimeoutError("print worker is not reading")
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue

    def _receive(self, n: int, deadline: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd, parts, got = self._proc.stdout.fileno(), [], 0
        while got < n:
            if not select.select([fd], [], [], _left(deadline))[0]:
                raise TimeoutError("print worker did not answer")
            part = os.read(fd, n - got)
            if not part:
                raise OSError("print worker ended")
            parts.append(part)
            got += len(part)
        return b"".join(parts)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("print worker timed out")
    return left


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def main() -> None:
    """The worker's loop: a frame of texts in, a frame of prints out, until end of input."""
    from .dedup import word_print

    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while (head := _read_exact(source, _LENGTH.size)) is not None:
        payload = _read_exact(source, _LENGTH.unpack(head)[0])
        if payload is None:
            return
        prints = array("q", [word_print(text) for text in pickle.loads(payload)])
        if sys.byteorder != "little":
            prints.byteswap()
        out = prints.tobytes()
        sink.write(_LENGTH.pack(len(out)) + out)
        sink.flush()


if __name__ == "__main__":
    main()
