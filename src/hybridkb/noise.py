"""What unrelated text scores in this store: the background a vector hit is judged against.

A cosine means nothing alone: the same model gives unrelated short texts 0.1 in one store
and 0.35 in another (many items, or items alike). So each store measures it: a fixed set
of probe texts that answer nothing (random letters, recipes, sport, weather...) are
embedded and searched over the whole store; the mean and deviation of their best cosines
is the background (`calibration.Background`). A vector hit near that mean is no evidence.
Kept in the store's meta per model, measured again when the store's size has moved by a
quarter; a store that cannot be written (a replica) keeps it in memory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from collections.abc import Callable, Mapping

from .calibration import Background
from .embedding import Embedder
from .errors import HybridKBError
from .model import Filters
from .storage import notices
from .storage.contract import Backend, SearchArea, Vector

log = logging.getLogger("hybridkb")

META_KEY = "noise_cosine"
FORMAT = 1
MIN_STD = 0.02
DRIFT = 1.25  # re-measure when the item count grows or shrinks past this factor
PROBES = (
    "asdkjhqwe zzxq", "qwpoe rtzu lkjh", "xkcd vbnm plok", "zzyzx quorble fnord",
    "recipe for banana bread", "how long to boil an egg", "best pizza dough with olive oil",
    "who won the football match last night", "tennis serve technique for beginners",
    "weather forecast for tomorrow in Paris", "will it snow this weekend",
    "cheap flights to Lisbon in May", "how to knit a wool scarf", "repotting a cactus",
    "the plot of a romantic comedy film", "learn to play guitar chords",
)


class NoiseFloor:
    """One store's background, measured once and kept (meta and memory)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: tuple[str, int, Background] | None = None  # (model, items, background)
        self._probes: dict[str, list[Vector]] = {}  # model -> probe vectors

    def get(self, backend: Backend, embedder: Embedder | None, corpora: Mapping[str, int],
            now: float, notes: list[str]) -> Background | None:
        """The store's background; what the store notes while the probes search (a damaged
        index met and rebuilt, say) goes to `notes`, the search's own."""
        items = sum(corpora.values())
        if not items or embedder is None:
            return None
        model_id, embed = embedder.model_id, embedder.embed_query
        with self._lock, notices.collecting() as noted:
            known = self._known
            if known is None or known[0] != model_id or not _close(known[1], items):
                known = self._read(backend, model_id, items)
                if known is None:
                    measured = self._measure(backend, model_id, embed, corpora, now)
                    if measured is None:  # nothing measured: nothing kept, in meta or here
                        return None
                    known = (model_id, items, measured)
                    self._write(backend, known)
                self._known = known
        notes.extend(n for n in noted if n not in notes)
        return known[2]

    def _measure(self, backend: Backend, model_id: str, embed: Callable[[str], Vector],
                 corpora: Mapping[str, int], now: float) -> Background | None:
        """None when the embedder cannot embed the probes (remembered for this process only:
        a stored background would outlive the failure)."""
        probes = self._probes.get(model_id)
        if probes is None:
            try:
                probes = [embed(text) for text in PROBES]
            except Exception:  # a caller's model that reads only its own queries: no background
                log.warning("the embedder could not embed the noise probes; vector hits are "
                            "judged without the store's background cosine", exc_info=True)
                probes = []
            self._probes[model_id] = probes
        if not probes:
            return None
        area = SearchArea(corpora=tuple(sorted(corpora)), filters=Filters(), now=now)
        best = [found[0][1] for vec in probes if (found := backend.vector_search(vec, area, 1))]
        if not best:
            return Background(0.0, 1.0)
        mean = sum(best) / len(best)
        std = math.sqrt(sum((b - mean) ** 2 for b in best) / len(best))
        return Background(mean, max(std, MIN_STD))

    @staticmethod
    def _read(backend: Backend, model_id: str, items: int) -> tuple[str, int, Background] | None:
        raw = backend.get_meta(META_KEY)
        try:
            data = json.loads(raw) if raw else None
            if (not isinstance(data, dict) or data.get("format") != FORMAT
                    or data.get("model") != model_id or not _close(int(data["items"]), items)):
                return None
            return model_id, int(data["items"]), Background(float(data["mean"]), float(data["std"]))
        except (ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def _write(backend: Backend, known: tuple[str, int, Background]) -> None:
        model_id, items, bg = known
        with contextlib.suppress(HybridKBError):  # read-only (a replica) or busy: memory only
            backend.set_meta(META_KEY, json.dumps({"format": FORMAT, "model": model_id, "items": items,
                                                   "mean": bg.mean, "std": bg.std}), wait=False)


def _close(recorded: int, items: int) -> bool:
    return recorded > 0 and recorded / DRIFT <= items <= recorded * DRIFT
