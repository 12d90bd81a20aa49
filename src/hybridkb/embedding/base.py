"""The Embedder protocol: one abstract method, everything else derived from it."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class Embedder(ABC):
    """Turns texts into L2-normalized float32 rows of width `dim`.

    Subclasses implement `embed_batch`; `embed_documents` and `embed_query`
    are derived so a model with asymmetric prompts can override just those.
    """

    name: str
    dim: int
    version: str = "1"
    batch_size: int = 32
    # A model reads at most its maximum sequence length: text past `max_chars` cannot
    # change its vector, so it is cut before tokenizing (None: the model reads it all).
    max_chars: int | None = None

    def clip(self, text: str) -> str:
        """`text` cut to what the model can read (a 10 MB query costs what 8 kB does)."""
        return text if self.max_chars is None else text[: self.max_chars]

    @abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        """Embed `texts` into an array of shape (len(texts), dim), rows L2-normalized."""

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        texts = [self.clip(t) for t in texts]
        out = [self.embed_batch(texts[i : i + self.batch_size])
               for i in range(0, len(texts), self.batch_size)]
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        stacked: Vectors = np.vstack(out).astype(np.float32, copy=False)
        return stacked

    def embed_query(self, text: str) -> Vectors:
        return np.asarray(self.embed_batch([self.clip(text)])[0], dtype=np.float32)

    @property
    def model_id(self) -> str:
        """Name and version: what the store records to refuse a different model."""
        return f"{self.name}@{self.version}"


def normalize_rows(matrix: npt.NDArray[np.floating]) -> Vectors:
    m = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (m / norms).astype(np.float32, copy=False)
    return out


def content_hash(text: str) -> str:
    """Hash of what gets embedded, so unchanged text is never embedded twice."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
