"""Embedding behind the writes: a thread that drains a store's pending-embeddings queue.

Writes in `embed="defer"` mode commit text only; the items without a current
vector are the queue (it lives in the store, so it survives restarts and crashes).
`hybridkb serve` and `hybridkb index --watch` run one of these beside their work.
"""

from __future__ import annotations

import logging
import threading

from .errors import HybridKBError
from .store import EMBED_BATCH, KnowledgeBase

log = logging.getLogger(__name__)


class BackgroundEmbedder:
    """Embeds pending items in batches until stopped; idles `idle` seconds when none wait.

    Call `wake()` after a write to start at once instead of at the next poll.
    """

    def __init__(self, kb: KnowledgeBase, *, idle: float = 1.0, batch_size: int = EMBED_BATCH) -> None:
        self.kb, self.idle, self.batch_size = kb, idle, batch_size
        self.embedded = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hybridkb-embedder", daemon=True)

    def start(self) -> BackgroundEmbedder:
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Ask the thread to stop after its current batch and wait for it."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> BackgroundEmbedder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                done = self.kb.embed_pending(batch_size=self.batch_size, stop=self._stop.is_set)
            except (HybridKBError, OSError) as exc:  # another model's store, a lost server: say so, retry
                if str(exc) != self.error:
                    log.warning("background embedding: %s", exc)
                self.error, done = str(exc), 0
            except Exception as exc:  # a bug or a read-only file: stop, said once, not a loop of tracebacks
                log.error("background embedding stopped: %s", exc)
                self.error = str(exc)
                return
            else:
                self.error = None
            self.embedded += done
            if done == 0:
                self._wake.wait(self.idle)
