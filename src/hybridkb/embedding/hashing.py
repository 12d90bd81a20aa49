"""A tiny deterministic embedder: hashed bag of words. For tests and offline demos."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from ..errors import InvalidInputError
from .base import Embedder, Vectors, normalize_rows

_WORD = re.compile(r"\w+")
MAX_DIM = 4096


class HashingEmbedder(Embedder):
    """Each lowercase word adds ±1 to a hashed coordinate; same text, same vector."""

    def __init__(self, dim: int = 64, name: str = "hashing") -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
            raise InvalidInputError(f"hashing embedder dimension must be an integer from 1 to {MAX_DIM}, "
                                    f"got {dim!r:.40}")
        self.dim = dim
        self.name = f"{name}-{dim}"

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        return normalize_rows(out)
