"""A `hybridkb serve --http` child process for tests that talk to it over a real socket."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_server(command: Callable[[int], Sequence[str]], env: Mapping[str, str],
                *, start_timeout: float) -> Iterator[int]:
    """Run `command(port)` until it listens on 127.0.0.1:port, yield the port, then stop it
    (terminate, kill after 10 s). A child that exits or never listens fails the test."""
    port = free_port()
    proc = subprocess.Popen(list(command(port)), env=dict(env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                assert proc.stderr is not None
                pytest.fail(f"server exited: {proc.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("server did not start listening")
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
