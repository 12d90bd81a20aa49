"""The baselines every hybridkb figure is divided by.

- BM25: `bm25s` (eager sparse scores, in memory), k1 = 1.2 and b = 0.75 as FTS5,
  English stopwords, stemmed when PyStemmer is installed. A query's time includes
  its tokenization, as an FTS query's includes hybridkb's query parsing.
- Vectors: one float32 matrix, `scores = M @ q`, argpartition for the top k, then
  a sort of those k. Exact, and the practical floor for exact search here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

K1, B = 1.2, 0.75  # FTS5's bm25() constants


def _stemmer() -> Any:
    try:
        import Stemmer  # PyStemmer, optional
    except ImportError:
        return None
    return Stemmer.Stemmer("english")


class BM25Baseline:
    def __init__(self, texts: Sequence[str]) -> None:
        import bm25s

        self._bm25s = bm25s
        self.stemmer = _stemmer()
        tokens = bm25s.tokenize(list(texts), stopwords="en", stemmer=self.stemmer,
                                show_progress=False)
        self.retriever = bm25s.BM25(k1=K1, b=B)
        self.retriever.index(tokens, show_progress=False)
        self.n = len(texts)

    def describe(self) -> dict[str, Any]:
        return {"library": f"bm25s {self._bm25s.__version__}", "k1": K1, "b": B,
                "stemmer": "snowball english" if self.stemmer else None,
                "call": "bm25s.tokenize + BM25.retrieve(k, n_threads=0)"}

    def search(self, query: str, k: int = 10) -> list[int]:
        tokens = self._bm25s.tokenize(query, stopwords="en", stemmer=self.stemmer,
                                      show_progress=False, return_ids=False)
        if not tokens[0]:
            return []
        docs, _ = self.retriever.retrieve(tokens, k=min(k, self.n), show_progress=False,
                                          n_threads=0)
        return [int(d) for d in docs[0]]


class NumpyExact:
    def __init__(self, vectors: npt.NDArray[np.float32]) -> None:
        self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)

    @staticmethod
    def describe() -> dict[str, Any]:
        return {"library": f"numpy {np.__version__}", "dtype": "float32",
                "call": "M @ q, argpartition top k, sort k"}

    def search(self, query: npt.NDArray[np.float32], k: int = 10) -> list[int]:
        scores = self.matrix @ query
        k = min(k, scores.size)
        top = np.argpartition(-scores, k - 1)[:k]
        return [int(t) for t in top[np.argsort(-scores[top])]]
