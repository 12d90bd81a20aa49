"""Your own sentence-embedding model: `embedder="onnx:PATH"`, a folder read by onnx_folder.

The model's token vectors are pooled as its folder says (mean, CLS, max or last token over
the attention mask), or taken as they come when it outputs `sentence_embedding` or one
vector per text; queries and documents get the folder's prefixes ("query: ", ...). The
store records `onnx:FOLDER@DIGEST`, so vectors of another model are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from .base import Embedder, Vectors, normalize_rows
from .onnx_folder import ModelFolder, feeds, load, read_folder

CHARS_PER_TOKEN = 32  # text past max_tokens * this cannot reach the model (as minilm.py)


def pool(hidden: np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
    """One row per text from (texts, tokens, dim) token vectors and their 0/1 mask."""
    m = mask.astype(hidden.dtype)[:, :, None]
    pooled: np.ndarray
    if how == "cls":
        pooled = hidden[:, 0]
    elif how == "max":
        pooled = np.where(m > 0, hidden, -np.inf).max(axis=1)
    elif how == "last":
        last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1] > 0, axis=1)  # right or left padded
        pooled = hidden[np.arange(len(hidden)), last]
    else:
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return pooled


class OnnxEmbedder(Embedder):
    """A sentence-embedding model exported to ONNX, with its tokenizer.json."""

    batch_size = 16

    def __init__(self, path: str | Path) -> None:
        self.folder: ModelFolder = read_folder(path)
        self.name = f"onnx:{self.folder.path.resolve().name}"
        self.version = self.folder.digest
        self.max_chars = self.folder.max_tokens * CHARS_PER_TOKEN
        self._tokenizer, self._session = load(self.folder)
        outputs = [o.name for o in self._session.get_outputs()]
        self._output = "sentence_embedding" if "sentence_embedding" in outputs else outputs[0]
        self.dim = int(self._raw(["dimension probe"]).shape[1])

    def _raw(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(list(texts))
        (out,) = self.run_onnx(self._session, [self._output], feeds(self._session, encodings))
        out = np.asarray(out, dtype=np.float32)
        if out.ndim == 3:
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            out = pool(out, mask, self.folder.pooling)
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise InvalidInputError(f"{self.folder.model}: output {self._output!r} has shape "
                                    f"{out.shape}; expected (texts, tokens, dim) or (texts, dim)")
        return out

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Length-sorted batches waste little padding; the order is restored after.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._raw([texts[i] for i in idx])
        return normalize_rows(out)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        prefix = self.folder.document_prefix
        return super().embed_documents([prefix + t for t in texts] if prefix else texts)

    def embed_query(self, text: str) -> Vectors:
        return super().embed_query(self.folder.query_prefix + text)

    def describe(self) -> dict[str, Any]:
        """What was read from the folder (for `stats()` and error messages)."""
        f = self.folder
        return {"model": str(f.model), "pooling": f.pooling, "query_prefix": f.query_prefix,
                "document_prefix": f.document_prefix, "max_tokens": f.max_tokens, "dim": self.dim}
