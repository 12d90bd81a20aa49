"""hybridkb.open() raises glibc's malloc thresholds once (allocator.py), unless told not to."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's")

_PROBE = """
import sys, hybridkb
from hybridkb import allocator
before = allocator._done
kb = hybridkb.open(sys.argv[1], embedder=None)
kb.close()
print(before, allocator._done, allocator.keep_freed_memory())
"""


def _run(tmp_path, env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "HYBRIDKB_MALLOC_TUNING"}
    if env_value is not None:
        env["HYBRIDKB_MALLOC_TUNING"] = env_value
    out = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "kb.db")], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_open_sets_the_thresholds_once(tmp_path):
    assert _run(tmp_path, None) == "None True True"


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_the_environment_turns_it_off(tmp_path, value):
    assert _run(tmp_path, value) == "None False False"
