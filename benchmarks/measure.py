"""Timing primitives: clocks, percentiles, memory, file sizes, and the query embedder
the benchmark searches with."""

from __future__ import annotations

import os
import resource
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridkb.embedding import Embedder, Vectors


def clock(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """(result, seconds) of one call."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 and mean in milliseconds (linear interpolation between samples)."""
    if not seconds:
        return {"n": 0, "p50_ms": float("nan"), "p95_ms": float("nan"),
                "p99_ms": float("nan"), "mean_ms": float("nan")}
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"n": len(seconds), "p50_ms": round(float(p50), 4), "p95_ms": round(float(p95), 4),
            "p99_ms": round(float(p99), 4), "mean_ms": round(float(ms.mean()), 4)}


def ratios(figure: Mapping[str, float], baseline: Mapping[str, float]) -> dict[str, float]:
    """figure / baseline for each percentile both have."""
    out: dict[str, float] = {}
    for key in ("p50_ms", "p95_ms", "p99_ms", "mean_ms"):
        if key in figure and key in baseline and baseline[key] > 0:
            out[key.removesuffix("_ms")] = round(figure[key] / baseline[key], 3)
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set size so far: VmHWM. Not ru_maxrss, which a
    child started by fork + exec inherits from its parent (Linux keeps the larger)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except (OSError, ValueError, IndexError):
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def current_rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def store_files(path: Path) -> dict[str, int]:
    """Bytes of the database file, its -wal and -shm (0 when absent)."""
    out = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        out["db" if not suffix else suffix[1:]] = p.stat().st_size if p.exists() else 0
    return out


def remove_store(path: Path) -> None:
    """The file, its WAL and its derived indexes (`<file>.idx/`)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(f"{path}.idx", ignore_errors=True)


class BenchEmbedder(Embedder):
    """The store's model under its own name; queries are looked up (live=False) or
    embedded by the model and timed (live=True). A lookup costs a dict access."""

    def __init__(self, model: Embedder, vectors: Mapping[str, Vectors]) -> None:
        self.model = model
        self.vectors = dict(vectors)
        self.name, self.dim, self.version = model.name, model.dim, model.version
        self.batch_size = model.batch_size
        self.live = False
        self.embed_seconds: list[float] = []

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return self.model.embed_batch(texts)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> Vectors:
        if not self.live:
            found = self.vectors.get(text)
            if found is not None:
                return found
        start = time.perf_counter()
        vec = self.model.embed_query(text)
        self.embed_seconds.append(time.perf_counter() - start)
        return vec
