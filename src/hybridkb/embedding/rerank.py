"""A rerank stage with a cross-encoder you bring: `hybridkb.open(..., rerank="onnx:PATH")`.

A cross-encoder reads the query and one candidate together and gives one relevance logit
(or two, not relevant / relevant); hybridkb reorders the first `rerank_depth` hits of a
search by it and shows it on each hit as `rerank_score`, the logit's sigmoid in [0, 1].
The folder is read as an embedding model's is (onnx_folder.py). No reranker's weights
ship with hybridkb: none is published where this project may fetch it.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import InvalidInputError
from ..validation import check_rerank_depth
from .minilm import CHARS_PER_TOKEN
from .onnx_folder import ModelFolder, feeds, load, read_folder

DEFAULT_DEPTH = 30  # hits reordered: a cross-encoder reads each with the query, ~ms apiece


class Reranker(ABC):
    """Scores (query, text) pairs; higher is more relevant, each in [0, 1]. A search's first
    `depth` hits are reordered by it."""

    name: str
    depth: int = DEFAULT_DEPTH

    @abstractmethod
    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance in [0, 1] per text, for this query."""


class OnnxReranker(Reranker):
    """A cross-encoder exported to ONNX (`--task text-classification`), with tokenizer.json."""

    batch_size = 16

    def __init__(self, path: str | Path, depth: int = DEFAULT_DEPTH) -> None:
        self.depth = check_rerank_depth(depth)
        self.folder: ModelFolder = read_folder(path)
        self.name = f"onnx:{self.folder.path.resolve().name}"
        self._tokenizer, self._session = load(self.folder)
        self._output = self._session.get_outputs()[0].name

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        out: list[float] = []
        max_chars = self.folder.max_tokens * CHARS_PER_TOKEN
        for start in range(0, len(texts), self.batch_size):
            pairs = [(query[:max_chars], t[:max_chars]) for t in texts[start : start + self.batch_size]]
            encodings = self._tokenizer.encode_batch(pairs)
            (logits,) = self._session.run([self._output], feeds(self._session, encodings))
            logits = np.asarray(logits, dtype=np.float64).reshape(len(pairs), -1)
            if logits.shape[1] == 2:  # (not relevant, relevant): the difference is the logit
                logits = logits[:, 1:] - logits[:, :1]
            if logits.shape[1] != 1:
                raise InvalidInputError(f"{self.folder.model}: a cross-encoder gives one or two "
                                        f"logits per pair, this one {logits.shape[1]}")
            out.extend((1.0 / (1.0 + np.exp(-logits[:, 0]))).tolist())
        return out


def get_reranker(spec: Reranker | str | None, depth: int | None = None) -> Reranker | None:
    """None, a Reranker, or "onnx:PATH" (a cross-encoder's folder); `depth` overrides its own."""
    if spec is None:
        return None
    if isinstance(spec, Reranker):
        if depth is None:
            return spec
        own = copy.copy(spec)  # the caller's object keeps its own depth
        own.depth = check_rerank_depth(depth)
        return own
    if isinstance(spec, str) and spec.strip()[:5].lower() == "onnx:":
        return OnnxReranker(spec.strip()[5:], DEFAULT_DEPTH if depth is None else depth)
    raise InvalidInputError(f"unknown reranker {spec!r}; use 'onnx:PATH' (a cross-encoder's folder) "
                            f"or a hybridkb.embedding.Reranker")
