"""One published generation of the vector index: files written once, then only read.

A generation folder holds the item vectors as a matrix in rowid order (memory-mapped:
exact scans over a filter's rows gather just those pages), the rowids (`rowids.i64`), the
attributes the default filters test (corpus code, expiry, staleness: masks, so the common
search needs no SQL) and, past `CODES_MIN_ROWS`, first passes that pick rows for an exact
rescore: one-bit codes (`codes.u64` with their centre `center.f32`, vector_codes.py,
written with the base, stored cell by cell: `cells.f32`, `offsets.i64` and `order.i32`,
vector_cells.py, so a query scans its nearest cells' codes only) and, past `ANN_MIN_ROWS`
or where the codes fall short, a usearch HNSW graph (`ann.usearch`, f16, opened as a
memory-mapped view, added in the background).
A base with codes keeps its matrix as one signed byte per component with a float32
scale per row (`matrix.i8` and `scales.f32`, vector_math.quantize), a quarter of float32's
size: the codes pick the rows to rescore, the bytes order them, and the best of those are
scored again exactly on the stored vectors themselves (vector_knn.py), so the cosines a search
returns are the stored values' (`approximate`). A base without codes is scanned whole by
every search and answers from its float32 matrix (`matrix.f32`). Each build makes its
cells and codes from the stored values themselves (an int8 base's rows times their scale,
in one pass over them: vector_sweep.py) and measures its passes on them, on the same
pseudo-queries (vector_recall.py); searches
use the faster of those that reach recall@10 0.95, or scan exactly. Nothing is loaded
whole: opening a generation maps its files. A generation is built in a temporary folder
and published by renaming it into place; the store then records it (see vectors.py). Its
files are never rewritten: measuring its passes again on other queries (the store's own,
once it has kept enough) adds a small `measured-K.json` beside them, and the store
records the generation as `<folder>@K` (`generation_name`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...progress import ProgressFactory, no_progress
from . import vector_cells, vector_codes, vector_sweep, verify
from .vector_batch import Batch, RowIds, Vector
from .vector_math import ScaledRows, as_float32, dot_rows
from .vector_recall import Probe, calibrate, kth_scores, probe, pseudo_queries

FORMAT = 6  # 6: the codes stored cell by cell (meta "codes" "cells": their count, vector_cells.py)
# Generations of these formats are still read (searches answer from them) while the base is
# built again in the current one: 3, the float32 matrix of every base; 4, a coded base's at
# half precision; 5, its int8 matrix with codes in base order (a whole-base code scan).
READABLE = (3, 4, 5, FORMAT)
CELL_FILES = ("cells.f32", "offsets.i64", "order.i32")  # centroids, each cell's start, positions
MATRIX = {"i8": ("matrix.i8", np.int8), "f16": ("matrix.f16", np.float16),
          "f32": ("matrix.f32", np.float32)}
SCALES = "scales.f32"  # an i8 matrix's scale per row
MAPPED = ("rowids.i64", "matrix.i8", SCALES, "matrix.f16", "matrix.f32", "corpus.i32",
          "expires.f64", "stale.u8", "codes.u64", "ann.usearch", *CELL_FILES)
MEASURED = "measured-{}.json"  # a later measurement of a generation's passes (remeasure)
_AT = "@"  # a published generation's name: its folder, then "@K" once measured again
# Below this many vectors a base keeps no first pass: an exact scan of the mapped matrix is
# fast enough (about 2.5 ms at 20k x 384 on our 2-core machines) and exact.
CODES_MIN_ROWS = 30_000
# The codes' scan grows with the base (12 ms at 1M rows on one core); past this size, or
# where the codes cannot hold the target recall, an HNSW graph is built in the background
# as well, and searches take the faster of the two that holds recall.
ANN_MIN_ROWS = 2_000_000
# HNSW settings chosen by measured recall@10 against exact (docs/benchmarks.md): f16
# storage, 16 links, ef 128 when adding and at least 128 when searching.
ANN_DTYPE = "f16"
CONNECTIVITY = 16
EF_ADD = 128
EF_SEARCH = 128  # the breadth of a graph built before its recall was measured (vector_recall.py)


class BaseUnusable(Exception):
    """A generation folder is missing or damaged."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """The default filters as masks: corpora (None: all), the clock, and what to include."""

    corpora: tuple[str, ...] | None
    now: float
    include_expired: bool
    include_stale: bool

    def mask(self, corpora: Any, expires: Any, stale: Any) -> npt.NDArray[np.bool_]:
        keep = np.ones(len(expires), dtype=bool)
        if self.corpora is not None:
            keep &= np.isin(corpora, list(self.corpora))
        if not self.include_expired:
            keep &= np.asarray(expires) > self.now
        if not self.include_stale:
            keep &= ~np.asarray(stale, dtype=bool)
        return keep


@dataclass(slots=True)
class VectorBase:
    folder: Path
    seq: int
    dim: int
    rowids: RowIds
    matrix: Any  # ScaledRows (a coded base), float32 (or an older format's float16) rows, mapped
    ann: Any | None  # usearch.index.Index view
    corpus_codes: npt.NDArray[np.int32]
    corpus_names: list[str]
    expires: npt.NDArray[np.float64]
    stale: npt.NDArray[np.uint8]
    # The whole-base mask of each filter searches used, with its share of the base, and the
    # clock range it holds for: [computed at, the next expiry after that) (masked()).
    _masks: dict[tuple[Any, ...], tuple[npt.NDArray[np.bool_], float, float, float]] = field(
        default_factory=dict)
    # The graph's search breadth and the recall@10 its build measured (vector_recall.py);
    # graph_ok False: it cannot hold the target recall here, so searches scan exactly.
    ef: int = EF_SEARCH
    recall: float | None = None
    graph_ok: bool = True
    # One-bit codes, column-major (words, n), their centre, and the rows rescored per query
    # that reached the target recall (None: codes absent or short of the target).
    codes: Any | None = None
    center: npt.NDArray[np.float32] | None = None
    rescore: int | None = None
    codes_recall: float | None = None
    # The codes' cells (format 6) and the rows a query scans in them that, with `rescore`,
    # reached the target recall (the base's size: every cell).
    cells: vector_cells.Cells | None = None
    budget: int | None = None
    _kept: dict[int, tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]] = field(default_factory=dict)
    # "graph", "codes" or None (exact scans): the faster measured pass that holds recall.
    first_pass: str | None = None
    # The store's asked queries the passes were measured on (storage/asked.py; 0: pseudo-
    # queries) and the seq of the newest of them.
    asked: int = 0
    asked_through: int = 0
    measurement: int = 0  # which measured-K.json overlays meta.json (0: none)
    stamps: verify.Stamps = ()  # the mapped files as opened (unchanged(): before searches)
    outdated: bool = False  # an older FORMAT: searched, and built again in the background
    # Its int8 rows and scales are the stored vectors' own bytes (format 6 on: built from
    # the int8 stored values, codec.quantize): knn scores its best rows on them, no reread.
    rows_stored: bool = False
    _rechecked: float = 0.0

    @property
    def approximate(self) -> bool:
        """Its scores only order rows: the best are scored again on the stored vectors."""
        return isinstance(self.matrix, ScaledRows)

    @property
    def incomplete(self) -> bool:
        """A first pass its size calls for is missing (codes, or a graph where graph_due)."""
        n = len(self)
        return (self.codes is None and n >= CODES_MIN_ROWS) or (
            self.ann is None and graph_due(n, codes_hold=self.rescore is not None))

    def masked(self, wanted: Wanted) -> tuple[npt.NDArray[np.bool_], float]:
        """`allowed(wanted)` over the whole base (read-only) and the share it keeps; kept
        until the clock passes the next expiry, so a search pays for it once per filter."""
        key = (wanted.corpora, wanted.include_expired, wanted.include_stale)
        found = self._masks.get(key)
        if found is not None and found[2] <= wanted.now < found[3]:
            return found[0], found[1]
        mask = self.allowed(wanted)
        mask.flags.writeable = False
        later = self.expires[self.expires > wanted.now]
        until = float(later.min()) if later.size else float("inf")
        share = float(mask.mean()) if mask.size else 0.0
        if len(self._masks) > 16:
            self._masks.clear()
        self._masks[key] = (mask, share, wanted.now, until)
        return mask, share

    def allowed(self, wanted: Wanted, positions: npt.NDArray[np.int64] | None = None
                ) -> npt.NDArray[np.bool_]:
        """Which rows (all, or those at `positions`) the default filters keep."""
        sel: Any = slice(None) if positions is None else positions
        codes = None
        if wanted.corpora is not None:
            names = {c: i for i, c in enumerate(self.corpus_names)}
            codes = [names[c] for c in wanted.corpora if c in names]
        clock = Wanted(None, wanted.now, wanted.include_expired, wanted.include_stale)
        keep: npt.NDArray[np.bool_] = clock.mask(None, self.expires[sel], self.stale[sel])
        if codes is not None:
            keep &= np.isin(self.corpus_codes[sel], codes)
        return keep

    @classmethod
    def open(cls, folder: Path, *, with_ann: bool = True, measurement: int = 0) -> VectorBase:
        """The generation in `folder`, with its passes as measured at its build or, given
        `measurement`, as measured again later (`measured-K.json`). BaseUnusable when a
        file is not the one its build wrote (verify.py: sizes, changed files' checksums)."""
        damage = verify.generation_problems(folder, full=False)
        if damage:
            raise BaseUnusable(f"vector index is damaged: {'; '.join(damage[:3])}")
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") not in READABLE:
                raise BaseUnusable(f"vector base format {meta.get('format')} is not {FORMAT}")
            if measurement:
                later = json.loads((folder / MEASURED.format(measurement)).read_text(encoding="utf-8"))
                if meta.get("codes") and later.get("codes"):
                    later["codes"] = {**meta["codes"], **later["codes"]}
                meta.update(later)
            n, dim = int(meta["n"]), int(meta["dim"])

            def mapped(name: str, dtype: Any, shape: tuple[int, ...]) -> Any:
                # a plain array over the map (it keeps the map open): slicing a np.memmap runs
                # Python code for each slice, under the GIL, and the code scan slices ~100 times
                return np.asarray(np.memmap(folder / name, dtype=dtype, mode="r", shape=shape)) if n else \
                    np.zeros(shape, dtype=dtype)

            rowids = mapped("rowids.i64", np.int64, (n,))
            matrix_file, matrix_type = MATRIX[meta.get("matrix", "f32")]
            matrix = mapped(matrix_file, matrix_type, (n, dim))
            if matrix_type == np.int8:
                matrix = ScaledRows(matrix, mapped(SCALES, np.float32, (n,)))
            corpus = mapped("corpus.i32", np.int32, (n,))
            expires = mapped("expires.f64", np.float64, (n,))
            stale = mapped("stale.u8", np.uint8, (n,))
            coded = meta.get("codes")
            codes = center = cells = None
            if coded:
                center = np.fromfile(folder / "center.f32", dtype=np.float32)
                codes = mapped("codes.u64", np.uint64, (vector_codes.words_per_code(dim), n))
                if center.shape != (dim,):
                    raise BaseUnusable("vector codes do not match the matrix")
            if coded and coded.get("cells"):
                count = int(coded["cells"])
                cells = vector_cells.Cells(mapped("cells.f32", np.float32, (count, dim)),
                                           mapped("offsets.i64", np.int64, (count + 1,)),
                                           mapped("order.i32", np.int32, (n,)))
                if int(cells.offsets[-1]) != n:
                    raise BaseUnusable("vector cells do not match the matrix")
            ann = None
            if with_ann and meta.get("ann") and (folder / "ann.usearch").exists():
                ann = usearch_index().restore(str(folder / "ann.usearch"), view=True)
                if ann is None or len(ann) != n:
                    raise BaseUnusable("vector graph does not match the matrix")
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise BaseUnusable(f"vector base {folder.name} is damaged: {exc}") from exc
        calibrated = "ef" in meta
        ef = int(meta["ef"] or EF_SEARCH) if calibrated else EF_SEARCH
        graph_ok = not calibrated or meta["ef"] is not None
        if ann is not None:
            ann.expansion_search = ef
        rescore = coded.get("rescore") if coded else None
        return cls(folder, int(meta["seq"]), dim, np.asarray(rowids), matrix, ann, np.asarray(corpus),
                   list(meta.get("corpora", [])), np.asarray(expires), np.asarray(stale), ef=ef,
                   recall=meta.get("recall"), graph_ok=graph_ok, codes=codes, center=center,
                   rescore=rescore, codes_recall=coded.get("recall") if coded else None,
                   cells=cells, budget=coded.get("budget") if coded else None,
                   asked=int(meta.get("asked", {}).get("count", 0)),
                   asked_through=int(meta.get("asked", {}).get("through", 0)),
                   measurement=measurement, first_pass=_first_pass(meta, graph=ann is not None and graph_ok,
                                          codes=codes is not None and rescore is not None),
                   stamps=verify.stamps(folder, MAPPED), outdated=meta["format"] != FORMAT,
                   rows_stored=isinstance(matrix, ScaledRows) and meta["format"] >= 6)

    def unchanged(self) -> bool:
        """Whether the mapped files are the ones opened (looked at again at most every
        verify.RECHECK_S): a file rewritten or cut short under the map would answer wrong,
        or end the process with SIGBUS."""
        now = time.monotonic()
        if now - self._rechecked < verify.RECHECK_S:
            return True
        self._rechecked = now
        return verify.same(self.stamps)

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
            return np.asarray(self.rowids), dot_rows(self.matrix, query)
        return np.asarray(self.rowids[positions]), dot_rows(self.matrix, query, positions)

    def coded(self, query: Vector, count: int, mask: npt.NDArray[np.bool_] | None = None,
              counted: npt.NDArray[np.bool_] | None = None) -> tuple[RowIds, Vector]:
        """The rows nearest by one-bit code (only those `mask` keeps), scored on the matrix: at
        least the calibrated rescore depth, and four times `count` for deep lists (hybrid
        asks 300: at twice that, NFCorpus hybrid lost 0.0045 nDCG@10 to the exact scan).
        With cells, the query's best cells until the measured rows are scanned, counted in
        the rows `counted` keeps (a filter's whole-base mask, kept across searches: masked())."""
        if self.codes is None or self.center is None or self.rescore is None:
            return self.exact(query, None if mask is None else np.flatnonzero(mask))
        if self.cells is not None:  # its codes are in cell order: never the base-order scan
            budget, rescore = vector_cells.effort(self.budget or len(self), self.rescore, count)
            kept = None if counted is None else self._kept_by(counted)
            picks, scores = vector_cells.search(self.cells, self.codes, self.center, self.matrix,
                                                query, budget, rescore, mask, kept)
            return np.asarray(self.rowids[picks]), scores
        picks, scores = vector_codes.search(self.codes, self.center, self.matrix, query,
                                            max(self.rescore, 4 * count), mask)
        return np.asarray(self.rowids[picks]), scores

    def _kept_by(self, counted: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """Rows of each cell `counted` keeps (kept with the mask: a gather of the whole base)."""
        found = self._kept.get(id(counted))
        if found is not None and found[0] is counted:
            return found[1]
        assert self.cells is not None
        if len(self._kept) > 16:
            self._kept.clear()
        kept = self.cells.kept(counted)
        self._kept[id(counted)] = (counted, kept)
        return kept

    def nearest(self, query: Vector, count: int) -> tuple[RowIds, Vector]:
        """The graph's `count` nearest rows, scored exactly on the mapped matrix: the graph's
        f16 distances only pick them, so its scores equal an exact scan's (and the delta's)."""
        if self.ann is None:
            return self.exact(query, None)
        # twice the rows asked for: top-300 recall 0.95 with ef 300, 0.99 with ef 600 (100k)
        self.ann.expansion_search = max(self.ef, 2 * count)
        found = self.ann.search(query, min(count, len(self)))
        keys = np.asarray(found.keys, dtype=np.int64)
        return self.exact(query, np.searchsorted(self.rowids, keys).astype(np.int64))


def _first_pass(meta: dict[str, Any], *, graph: bool, codes: bool) -> str | None:
    """The pass searches use: the one that holds recall, the faster measured when both do
    (a graph built before its time was measured counts as slower)."""
    if graph and codes:
        graph_s = meta.get("graph_seconds", float("inf"))
        return "codes" if meta["codes"]["seconds"] <= graph_s else "graph"
    return "graph" if graph else "codes" if codes else None


def generation_name(folder: str, measurement: int) -> str:
    """What the store records for a generation folder measured `measurement` times since its
    build (0: as built): a later measurement is a new name, so every reader opens it again."""
    return folder if not measurement else f"{folder}{_AT}{measurement}"


def split_generation(name: str) -> tuple[str, int]:
    """A recorded generation name -> (its folder, its measurement)."""
    folder, _, k = name.partition(_AT)
    return folder, int(k) if k.isdigit() else 0


def remeasure(base: VectorBase, queries: npt.NDArray[np.float32], through: int) -> dict[str, Any]:
    """The base's first passes measured again on `queries` (the store's own, storage/asked.py,
    the newest one's seq `through`): what `write_measurement` keeps. The matrix, codes and
    graph stay as they are; only the effort searches use, and its recall, can change. An
    int8 base is measured on its int8 rows (close to the stored values, not equal)."""
    probed = Probe(queries, kth_scores(base.matrix, queries), sampled=True)
    measured: dict[str, Any] = {"asked": {"count": len(queries), "through": int(through)}}
    if base.codes is not None and base.center is not None:
        measured["codes"] = _measure_codes(base.codes, base.center, base.matrix, probed, base.cells)
    if base.ann is not None:
        graph = calibrate(base.ann, base.matrix, np.asarray(base.rowids), probed=probed)
        measured.update(ef=graph.ef, recall=graph.recall, graph_seconds=round(graph.seconds, 6))
        base.ann.expansion_search = base.ef  # as searches of this (older) measurement expect
    return measured


def write_measurement(folder: Path, measurement: int, measured: dict[str, Any]) -> None:
    """`measured-K.json` written whole (a temporary file renamed into place)."""
    path = folder / MEASURED.format(measurement)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(measured))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _unit(matrix: Vector) -> Vector:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vector = (matrix / norms).astype(np.float32)
    return out


def usearch_index() -> Any:
    """usearch's Index class, imported after onnxruntime when that is installed.

    Loaded the other way round (usearch first), onnxruntime's C++ static initialisers
    crash the process (SIGSEGV in libstdc++'s codecvt: usearch 2.26, onnxruntime 1.32), and
    the default embedder loads onnxruntime lazily, at the first text it embeds: a process
    that searched a store with a graph before embedding anything died there.
    """
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401 - imported for its side effect: load order
    from usearch.index import Index

    return Index


class BuildCancelled(Exception):
    """A build was asked to stop (the store is closing); its temporary folder is removed."""


def build(
    folder: Path, dim: int, seq: int, batches: Iterable[Batch], total: int,
    *, ann: bool | None = None, codes: bool | None = None, progress: ProgressFactory = no_progress,
    threads: int = 1, cancelled: Callable[[], bool] = lambda: False,
    asked: tuple[npt.NDArray[np.float32] | None, int] = (None, 0),
) -> None:
    """Write a generation into `folder` (created; must not exist) from batches in
    ascending rowid order. `codes` None: one-bit codes past CODES_MIN_ROWS; `ann` None: a
    graph where `graph_due`. `asked` (storage/asked.py: the store's recent query vectors,
    or None, and the newest one's seq) is what the first passes are measured on, when
    given; else pseudo-queries. `cancelled` is asked
    between steps of about a second: a process must not exit while a graph step runs
    (usearch's threads abort an exiting interpreter)."""
    tmp = folder.with_name(folder.name + ".tmp")
    try:
        _build(tmp, dim, seq, batches, total, ann=ann, codes=codes, progress=progress,
               threads=threads, cancelled=cancelled, asked=asked)
        verify.seal(tmp)  # every file's checksum, before anyone can open it
    except BaseException:  # cancelled, or a full disk: the half-written folder goes
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.replace(tmp, folder)


def _build(
    tmp: Path, dim: int, seq: int, batches: Iterable[Batch], total: int, *, ann: bool | None,
    codes: bool | None, progress: ProgressFactory, threads: int, cancelled: Callable[[], bool],
    asked: tuple[npt.NDArray[np.float32] | None, int],
) -> None:
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    n = 0
    last = -1
    names: dict[str, int] = {}
    # int8 where the base will have codes (decided on the expected count)
    matrix_kind = "i8" if ((total >= CODES_MIN_ROWS) if codes is None else codes) else "f32"
    matrix_file, matrix_type = MATRIX[matrix_kind]
    written = ("rowids.i64", matrix_file, "corpus.i32", "expires.f64", "stale.u8") + (
        (SCALES,) if matrix_kind == "i8" else ())
    files = {name: open(tmp / name, "wb") for name in written}  # noqa: SIM115 - closed below
    try:
        with progress(total, "vector index: copy") as bar:
            for b in batches:
                if cancelled():
                    raise BuildCancelled
                if len(b.rowids) == 0:
                    continue
                if b.rowids[0] <= last or np.any(np.diff(b.rowids) <= 0):
                    raise ValueError("vector batches must come in ascending rowid order")
                last = int(b.rowids[-1])
                corpus = np.fromiter((names.setdefault(c, len(names)) for c in b.corpora),
                                     dtype=np.int32, count=len(b.corpora))
                files["rowids.i64"].write(np.ascontiguousarray(b.rowids, dtype=np.int64).tobytes())
                # as stored (unit length already, codec.normalized): renormalizing would move
                # the last bits and reorder ties against the other dialect and the delta
                if matrix_kind == "i8":  # the stored bytes as they are, when the batch has them
                    quantized, scales = b.quantized()
                    files[matrix_file].write(quantized.tobytes())
                    files[SCALES].write(scales.tobytes())
                else:
                    files[matrix_file].write(np.ascontiguousarray(b.vectors, dtype=matrix_type).tobytes())
                files["corpus.i32"].write(corpus.tobytes())
                files["expires.f64"].write(np.asarray(b.expires, dtype=np.float64).tobytes())
                files["stale.u8"].write(np.asarray(b.stale, dtype=np.uint8).tobytes())
                n += len(b.rowids)
                bar.update(len(b.rowids))
        for f in files.values():
            f.flush()
            os.fsync(f.fileno())
    finally:
        for f in files.values():
            f.close()
    with_codes = (n >= CODES_MIN_ROWS) if codes is None else (codes and n > 0)
    measured: dict[str, Any] = {}
    if with_codes or (graph_due(n, codes_hold=False) if ann is None else ann and n > 0):
        # its codes, cells, graph and measurements come from the stored values themselves:
        # an int8 base's rows times their scale (ScaledRows)
        matrix: Any = np.asarray(np.memmap(tmp / matrix_file, dtype=matrix_type, mode="r", shape=(n, dim)))
        if matrix_kind == "i8":
            matrix = ScaledRows(matrix, np.asarray(np.memmap(tmp / SCALES, dtype=np.float32, mode="r",
                                                             shape=(n,))))
        queries = asked[0]
        measured["asked"] = {"count": 0 if queries is None else len(queries), "through": asked[1]}
        if with_codes:
            measured["codes"], probed = _write_codes(tmp, matrix, n, queries, cancelled)
        else:
            probed = probe(matrix, n) if queries is None else Probe(queries, kth_scores(matrix, queries),
                                                                         sampled=True)
        held = with_codes and measured["codes"]["rescore"] is not None
        with_ann = graph_due(n, codes_hold=held) if ann is None else (ann and n > 0)
        if with_ann:
            if cancelled():
                raise BuildCancelled
            measured.update(_write_graph(tmp, matrix, n, dim, probed, progress=progress,
                                         threads=threads, cancelled=cancelled))
        del matrix
    else:
        with_ann = False
    (tmp / "meta.json").write_text(json.dumps(
        {"format": FORMAT, "matrix": matrix_kind, "n": n, "dim": dim, "seq": seq, "ann": with_ann,
         "corpora": sorted(names, key=names.__getitem__), **measured}), encoding="utf-8")


def graph_due(n: int, *, codes_hold: bool) -> bool:
    """Whether a base of `n` vectors wants a graph (when the store's mode leaves it open)."""
    return n >= ANN_MIN_ROWS or (n >= CODES_MIN_ROWS and not codes_hold)


def _write_codes(tmp: Path, matrix: Any, n: int, queries: npt.NDArray[np.float32] | None,
                 cancelled: Callable[[], bool]) -> tuple[dict[str, Any], Probe]:
    """The codes, stored cell by cell (vector_cells.py), their measured effort, and the
    queries measured on (`queries`, the store's own, or pseudo-queries): the rows' cells,
    codes and the queries' exact top 10 made in one pass over the rows (vector_sweep.py)."""
    asked = queries is not None
    # the samples are independent: the codes' centre and the pseudo-queries are made on
    # another thread while the cells train (numpy releases the GIL)
    with ThreadPoolExecutor(1, thread_name_prefix="hybridkb-samples") as pool:
        centered = pool.submit(vector_codes.center_of, matrix, n)
        made = None if asked else pool.submit(pseudo_queries, matrix, n)
        trained = vector_cells.train(matrix, n)
        center = centered.result()
        measuring = made.result() if made is not None else queries
    assert measuring is not None
    measuring = np.ascontiguousarray(measuring, dtype=np.float32)  # the sweep's products write float32
    swept = vector_sweep.sweep(matrix, n, center, trained, measuring, cancelled=cancelled)
    if cancelled() or swept.kth is None:
        raise BuildCancelled
    probed = Probe(measuring, swept.kth, sampled=asked)
    cells = vector_cells.from_assigned(trained, swept.cell, int(center.shape[0]))
    columns = vector_cells.permute(swept.columns, cells)
    del swept
    for name, array in (("center.f32", center), ("codes.u64", columns), ("cells.f32", cells.centroids),
                        ("offsets.i64", cells.offsets), ("order.i32", cells.order)):
        with open(tmp / name, "wb") as f:
            f.write(np.ascontiguousarray(array).tobytes())
            f.flush()
            os.fsync(f.fileno())
    return {**_measure_codes(columns, center, matrix, probed, cells), "cells": len(cells.centroids)}, probed


def _measure_codes(codes: Any, center: Any, matrix: Any, probed: Probe,
                   cells: vector_cells.Cells | None) -> dict[str, Any]:
    """meta.json's "codes": the effort searches use (cells: the rows scanned as well)."""
    if cells is None:  # an older format's codes, in base order
        found = vector_codes.calibrate(codes, center, matrix, probed)
        return {"rescore": found.rescore, "recall": found.recall, "seconds": round(found.seconds, 6)}
    paired = vector_cells.calibrate(cells, codes, center, matrix, probed)
    return {"rescore": paired.rescore, "budget": paired.budget, "recall": paired.recall,
            "seconds": round(paired.seconds, 6)}


def _write_graph(tmp: Path, matrix: Any, n: int, dim: int, probed: Probe, *,
                 progress: ProgressFactory, threads: int, cancelled: Callable[[], bool]
                 ) -> dict[str, Any]:
    Index = usearch_index()
    rowids_all = np.memmap(tmp / "rowids.i64", dtype=np.int64, mode="r", shape=(n,))
    graph = Index(ndim=dim, metric="cos", dtype=ANN_DTYPE, connectivity=CONNECTIVITY,
                  expansion_add=EF_ADD, expansion_search=EF_SEARCH)
    step = 2_000  # about a second per step on a busy core
    with progress(n, "vector index: graph") as bar:
        for start in range(0, n, step):
            if cancelled():
                raise BuildCancelled
            stop = min(n, start + step)
            graph.add(np.asarray(rowids_all[start:stop]).astype(np.uint64),
                      as_float32(matrix[start:stop]), threads=threads)
            bar.update(stop - start)
    measured = calibrate(graph, matrix, rowids_all, probed=probed)
    graph.save(str(tmp / "ann.usearch"))
    return {"ef": measured.ef, "recall": measured.recall, "graph_seconds": round(measured.seconds, 6)}
