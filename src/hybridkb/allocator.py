"""Keep the memory a search frees for the next one (glibc's malloc).

A search at a million items builds numpy arrays of a few megabytes (postings, weights,
tables over the rowid range) and frees them a millisecond later. glibc serves blocks
that large with mmap and unmaps them on free, and trims the heap's free top back to
the OS, so every search faults the same pages in again; in a virtual machine a fault
costs microseconds. Weighing 410,000 postings and summing them per document took 21-42
and 46-97 ms with the defaults, 6 and 14-17 ms with the thresholds below (the same
process and arrays, a loaded 2-core VM; docs/benchmarks.md). The price is that up to
TRIM_THRESHOLD of freed memory stays with the process (reused by the next search).

`keep_freed_memory()` is called once by `hybridkb.open()`; HYBRIDKB_MALLOC_TUNING=0
leaves the allocator alone. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

ENV = "HYBRIDKB_MALLOC_TUNING"
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest: blocks below come from the heap
TRIM_THRESHOLD = 512 * 1024 * 1024  # free heap kept before any is returned to the OS
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; whether they are set."""
    global _done
    if _done is None:
        _done = False
        if os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off") \
                and sys.platform.startswith("linux"):
            try:
                mallopt = ctypes.CDLL(None).mallopt
            except (OSError, AttributeError):  # not glibc (musl has no mallopt)
                return False
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                         and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
