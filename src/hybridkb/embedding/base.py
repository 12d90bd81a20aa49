"""The Embedder protocol: one abstract method, everything else derived from it."""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import EmbeddingInterrupted

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

    def in_length_order(self, texts: Sequence[str],
                        run: Callable[[list[str]], npt.NDArray[np.floating]]) -> Vectors:
        """`run`'s rows for `texts`, L2-normalized: it is given batches of `batch_size` texts
        of about one length (a batch padded to its longest then wastes little), and its rows
        are put back in the order of `texts`."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            self.check_interrupt()
            idx = order[start : start + self.batch_size]
            out[idx] = run([texts[i] for i in idx])
        return normalize_rows(out)

    def interrupt(self) -> None:
        """Ask embedding under way (on any thread) to stop soon: this and every later call
        raises EmbeddingInterrupted until `resume()`. Checked between batches, and an
        onnxruntime run under way (`run_onnx`) ends within milliseconds: a batch of long
        chunks takes seconds on a busy machine."""
        self._stopping().set()
        for options in list(self.__dict__.get("_runs", ())):
            options.terminate = True

    def resume(self) -> None:
        """Embed again after an `interrupt()`."""
        self._stopping().clear()

    def check_interrupt(self) -> None:
        if self._stopping().is_set():
            raise EmbeddingInterrupted("embedding was interrupted")

    def run_onnx(self, session: Any, outputs: list[str] | None, feeds: dict[str, Any]) -> Any:
        """`session.run(outputs, feeds)` that `interrupt()` can end."""
        import onnxruntime as ort

        options = ort.RunOptions()
        runs: set[Any] = self.__dict__.setdefault("_runs", set())
        runs.add(options)
        try:
            if self._stopping().is_set():  # asked between the last check and the registration
                options.terminate = True
            return session.run(outputs, feeds, options)
        except Exception as exc:
            if options.terminate:
                raise EmbeddingInterrupted("embedding was interrupted") from exc
            raise
        finally:
            runs.discard(options)

    def _stopping(self) -> threading.Event:
        event = self.__dict__.get("_stop_event")
        if event is None:
            event = self.__dict__.setdefault("_stop_event", threading.Event())
        return event  # type: ignore[no-any-return]

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        texts = [self.clip(t) for t in texts]
        out = []
        for i in range(0, len(texts), self.batch_size):
            self.check_interrupt()
            out.append(self.embed_batch(texts[i : i + self.batch_size]))
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
