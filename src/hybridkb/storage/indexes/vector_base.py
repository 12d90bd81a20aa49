"""One published generation of the vector index: files written once, then only read.

A generation folder holds the item vectors as a float32 matrix in rowid order
(`matrix.f32`, memory-mapped: exact scans over a filter's rows gather just those
pages), the rowids (`rowids.i64`) and, past `ANN_MIN_ROWS`, a usearch HNSW graph
(`ann.usearch`, f16, opened as a memory-mapped view). Nothing is loaded whole: opening
a generation maps three files. A generation is built in a temporary folder and
published by renaming it into place; the store then records it (see vectors.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...progress import ProgressFactory, no_progress

Vector = npt.NDArray[np.float32]
RowIds = npt.NDArray[np.int64]

FORMAT = 1
# Below this many vectors a base keeps no graph: an exact scan of the mapped matrix is
# fast enough (about 2.5 ms at 20k x 384 on our 2-core machines) and exact.
ANN_MIN_ROWS = 30_000
# HNSW settings chosen by measured recall@10 against exact (docs/benchmarks.md): f16
# storage, 16 links, ef 128 when adding and at least 128 when searching.
ANN_DTYPE = "f16"
CONNECTIVITY = 16
EF_ADD = 128
EF_SEARCH = 128


class BaseUnusable(Exception):
    """A generation folder is missing or damaged."""


@dataclass(slots=True)
class VectorBase:
    folder: Path
    seq: int
    dim: int
    rowids: RowIds
    matrix: npt.NDArray[np.float32]
    ann: Any | None  # usearch.index.Index view

    @classmethod
    def open(cls, folder: Path, *, with_ann: bool = True) -> VectorBase:
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT:
                raise BaseUnusable(f"vector base format {meta.get('format')} is not {FORMAT}")
            n, dim = int(meta["n"]), int(meta["dim"])
            rowids = np.memmap(folder / "rowids.i64", dtype=np.int64, mode="r", shape=(n,)) if n else \
                np.zeros(0, dtype=np.int64)
            matrix = np.memmap(folder / "matrix.f32", dtype=np.float32, mode="r", shape=(n, dim)) if n \
                else np.zeros((0, dim), dtype=np.float32)
            ann = None
            if with_ann and meta.get("ann") and (folder / "ann.usearch").exists():
                from usearch.index import Index

                ann = Index.restore(str(folder / "ann.usearch"), view=True)
                if ann is None or len(ann) != n:
                    raise BaseUnusable("vector graph does not match the matrix")
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise BaseUnusable(f"vector base {folder.name} is damaged: {exc}") from exc
        return cls(folder, int(meta["seq"]), dim, np.asarray(rowids), matrix, ann)

    def __len__(self) -> int:
        return len(self.rowids)

    def positions(self, rowids: RowIds) -> npt.NDArray[np.int64]:
        """Positions of the given sorted rowids that the base holds."""
        if len(self.rowids) == 0 or len(rowids) == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.searchsorted(self.rowids, rowids)
        pos = np.minimum(pos, len(self.rowids) - 1)
        out: npt.NDArray[np.int64] = pos[self.rowids[pos] == rowids].astype(np.int64)
        return out

    def exact(self, query: Vector, positions: npt.NDArray[np.int64] | None) -> tuple[RowIds, Vector]:
        """Cosine similarity of every row (or of `positions`): vectors are stored unit-length."""
        if positions is None:
            return np.asarray(self.rowids), np.asarray(self.matrix @ query, dtype=np.float32)
        block = self.matrix[positions]
        return np.asarray(self.rowids[positions]), np.asarray(block @ query, dtype=np.float32)

    def nearest(self, query: Vector, count: int) -> tuple[RowIds, Vector]:
        """The graph's `count` nearest rows (similarity = 1 - cosine distance)."""
        if self.ann is None:
            return self.exact(query, None)
        self.ann.expansion_search = max(EF_SEARCH, count)
        found = self.ann.search(query, min(count, len(self)))
        return (np.asarray(found.keys, dtype=np.int64),
                (1.0 - np.asarray(found.distances, dtype=np.float32)).astype(np.float32))


def _unit(matrix: Vector) -> Vector:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vector = (matrix / norms).astype(np.float32)
    return out


def build(
    folder: Path, dim: int, seq: int, batches: Iterable[tuple[RowIds, Vector]], total: int,
    *, ann: bool | None = None, progress: ProgressFactory = no_progress, threads: int = 1,
) -> None:
    """Write a generation into `folder` (created; must not exist) from (rowids, vectors)
    batches in ascending rowid order. `ann` None: a graph past ANN_MIN_ROWS."""
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    n = 0
    last = -1
    with open(tmp / "rowids.i64", "wb") as frows, open(tmp / "matrix.f32", "wb") as fmat, \
            progress(total, "vector index: copy") as bar:
        for rowids, vectors in batches:
            if len(rowids) == 0:
                continue
            if rowids[0] <= last or np.any(np.diff(rowids) <= 0):
                raise ValueError("vector batches must come in ascending rowid order")
            last = int(rowids[-1])
            frows.write(np.ascontiguousarray(rowids, dtype=np.int64).tobytes())
            fmat.write(np.ascontiguousarray(_unit(vectors)).tobytes())
            n += len(rowids)
            bar.update(len(rowids))
        frows.flush()
        fmat.flush()
        os.fsync(frows.fileno())
        os.fsync(fmat.fileno())
    with_ann = (n >= ANN_MIN_ROWS) if ann is None else (ann and n > 0)
    if with_ann:
        from usearch.index import Index

        rowids_all = np.memmap(tmp / "rowids.i64", dtype=np.int64, mode="r", shape=(n,))
        matrix = np.memmap(tmp / "matrix.f32", dtype=np.float32, mode="r", shape=(n, dim))
        graph = Index(ndim=dim, metric="cos", dtype=ANN_DTYPE, connectivity=CONNECTIVITY,
                      expansion_add=EF_ADD, expansion_search=EF_SEARCH)
        step = 10_000
        with progress(n, "vector index: graph") as bar:
            for start in range(0, n, step):
                stop = min(n, start + step)
                graph.add(np.asarray(rowids_all[start:stop]).astype(np.uint64),
                          np.asarray(matrix[start:stop]), threads=threads)
                bar.update(stop - start)
        graph.save(str(tmp / "ann.usearch"))
        del graph, rowids_all, matrix
    (tmp / "meta.json").write_text(json.dumps(
        {"format": FORMAT, "n": n, "dim": dim, "seq": seq, "ann": with_ann}), encoding="utf-8")
    os.replace(tmp, folder)
