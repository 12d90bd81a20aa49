"""Engines measured beside the store in the same run: the previous path (FTS5 `bm25()`)
and the bare engines under the derived indexes (tantivy and the vector base without
hybridkb's catch-up, filters, id mapping or pipeline)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridkb.model import Filters
from hybridkb.storage.indexes.vector_base import Wanted
from hybridkb.storage.indexes.vector_knn import knn
from hybridkb.storage.indexes.vectors import VectorDelta
from hybridkb.textquery import parse


class Fts5Path:
    """The text search the store ran before issue #15: an FTS5 table with the same
    tokenizer and column weights, queried with the same safe MATCH expression."""

    def __init__(self, path: Path, titles: Sequence[str | None], texts: Sequence[str],
                 weights: tuple[float, float] = (2.0, 1.0)) -> None:
        path.unlink(missing_ok=True)
        self.conn = sqlite3.connect(str(path))
        self.conn.execute("CREATE VIRTUAL TABLE f USING fts5 (title, text, "
                          "tokenize = 'porter unicode61 remove_diacritics 2')")
        self.conn.executemany("INSERT INTO f (rowid, title, text) VALUES (?, ?, ?)",
                              ((i + 1, t, x) for i, (t, x) in enumerate(zip(titles, texts, strict=True))))
        self.conn.commit()
        self.bm25 = f"bm25(f, {weights[0]!r}, {weights[1]!r})"
        self.path = path

    def search(self, text: str, limit: int) -> list[int]:
        match = parse(text).fts5()
        if match is None:
            return []
        return [r[0] for r in self.conn.execute(
            f"SELECT rowid FROM f WHERE f MATCH ? ORDER BY {self.bm25} LIMIT ?",  # noqa: S608
            (match, limit))]

    def close(self) -> None:
        self.conn.close()
        self.path.unlink(missing_ok=True)


class BareTantivy:
    """The store's own tantivy index, searched directly: no catch-up, filters or ids."""

    def __init__(self, kb: Any) -> None:
        self.index = kb.backend._text.current()
        self.everything = Filters(include_expired=True, include_stale=True)

    def search(self, text: str, limit: int) -> list[int]:
        return [r for r, _ in self.index.search(parse(text), corpora=None, filters=self.everything,
                                                now=0.0, limit=limit)]


class BareVectors:
    """The store's vector base searched directly, by the first pass searches use: usearch's
    graph, the one-bit codes with their rescore, or the mapped matrix; an int8 matrix's best
    rows scored on the stored vectors, as every search of the store does (vector_knn.knn)."""

    def __init__(self, kb: Any) -> None:
        dim = kb.backend.vector_dim()
        base, _ = kb.backend._vectors.view(dim)
        self.base = base
        self.source = kb.backend._vectors.source

    @property
    def has_graph(self) -> bool:
        return self.base is not None and self.base.first_pass == "graph"

    @property
    def what(self) -> str:
        found = None if self.base is None else self.base.first_pass
        celled = getattr(self.base, "cells", None) is not None
        scanned = getattr(self.base, "budget", None) if celled else None
        codes = f"one-bit codes, {'' if scanned is None else f'scanning {scanned} rows in cells, '}" \
                f"rescoring {getattr(self.base, 'rescore', 0)}"
        return {"graph": "HNSW f16", "codes": codes}.get(found or "", "flat, exact")

    def search(self, q: np.ndarray[Any, Any], limit: int) -> list[int]:
        if self.base is None:
            return []
        if self.base.first_pass == "graph":
            return [int(k) for k in self.base.ann.search(q, limit).keys]
        if self.base.approximate:
            empty = VectorDelta(self.base.seq, self.base.seq)
            everything = Wanted(None, 0.0, include_expired=True, include_stale=True)
            return [r for r, _ in knn(self.base, empty, q, limit, wanted=everything, source=self.source)]
        if self.base.first_pass == "codes":
            rowids, scores = self.base.coded(q, limit)
        else:
            rowids, scores = self.base.exact(q, None)
        top = np.argpartition(-scores, limit - 1)[:limit]
        return [int(rowids[i]) for i in top]
