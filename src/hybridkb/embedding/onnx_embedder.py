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
from .base import Embedder, Vectors
from .minilm import CHARS_PER_TOKEN
from .onnx_folder import ModelFolder, feeds, load, pool, read_folder


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
        return self.in_length_order(texts, self._raw)

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
