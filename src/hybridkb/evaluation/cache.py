"""Embeddings computed once per dataset and kept on disk.

An entry is an .npy matrix plus an .ids.json list, named by the embedder's
model_id, the sha256 of the source file and the sha256 of the ids and texts
actually embedded, so a changed file, text or model never reads a stale entry.
The folder is $HYBRIDKB_CACHE, else ~/.cache/hybridkb/embeddings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..embedding import Embedder, Vectors
from ..progress import Bar as Bar
from ..progress import ProgressFactory as ProgressFactory
from ..progress import no_progress as no_progress

CHUNK = 128  # texts per embedder call; the texts are sorted by length first


def default_cache_dir() -> Path:
    env = os.environ.get("HYBRIDKB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hybridkb" / "embeddings"


def texts_sha256(ids: Sequence[str], texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for item_id, text in zip(ids, texts, strict=True):
        digest.update(item_id.encode("utf-8", "surrogatepass") + b"\x00")
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x01")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Embedded:
    vectors: Vectors
    cached: bool  # read from the cache, no model run
    seconds: float  # time spent embedding (0 when cached)
    path: Path | None  # the cache entry, when caching is on


class EmbeddingCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else default_cache_dir()

    def entry(self, model_id: str, kind: str, source_sha: str, ids: Sequence[str],
              texts: Sequence[str]) -> Path:
        """The .npy path of an entry (its ids sit beside it as .ids.json)."""
        model = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)
        return self.root / model / f"{kind}-{source_sha[:16]}-{texts_sha256(ids, texts)[:24]}.npy"

    def load(self, path: Path, ids: Sequence[str], dim: int) -> Vectors | None:
        ids_path = path.with_suffix(".ids.json")
        try:
            stored_ids = json.loads(ids_path.read_text(encoding="utf-8"))
            matrix = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        if (stored_ids != list(ids) or matrix.shape != (len(ids), dim)
                or matrix.dtype != np.float32 or not np.all(np.isfinite(matrix))):
            return None
        return np.asarray(matrix, dtype=np.float32)

    def save(self, path: Path, ids: Sequence[str], vectors: Vectors) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path.with_suffix(".ids.json"),
                      json.dumps(list(ids), ensure_ascii=False).encode("utf-8"))
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as handle:
            np.save(handle, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
        os.replace(handle.name, path)


def _atomic_write(path: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, path)


def embed_texts(
    embedder: Embedder, texts: Sequence[str], *, queries: bool, progress: ProgressFactory,
    desc: str,
) -> Vectors:
    """Documents in length-sorted chunks (little padding); queries one by one with
    `embed_query`, exactly as a search embeds them."""
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    with progress(len(texts), desc) as bar:
        if queries:
            for i, text in enumerate(texts):
                out[i] = embedder.embed_query(text)
                bar.update(1)
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), CHUNK):
            idx = order[start : start + CHUNK]
            out[idx] = embedder.embed_documents([texts[i] for i in idx])
            bar.update(len(idx))
    return out


def cached_embed(
    embedder: Embedder, *, kind: str, source_sha: str, ids: Sequence[str], texts: Sequence[str],
    cache: EmbeddingCache | None, progress: ProgressFactory = no_progress,
) -> Embedded:
    """Vectors for `texts` from the cache, or computed and stored there."""
    path = cache.entry(embedder.model_id, kind, source_sha, ids, texts) if cache else None
    if cache is not None and path is not None:
        found = cache.load(path, ids, embedder.dim)
        if found is not None:
            return Embedded(found, True, 0.0, path)
    start = time.perf_counter()
    vectors = embed_texts(embedder, texts, queries=kind == "queries", progress=progress,
                          desc=f"embedding {kind}")
    seconds = time.perf_counter() - start
    if cache is not None and path is not None:
        cache.save(path, ids, vectors)
    return Embedded(vectors, False, seconds, path)


class PrecomputedQueries(Embedder):
    """Wraps an embedder: known query texts get their cached vector, others the model's.

    It reports the wrapped model's name and version, so the store sees one model.
    """

    def __init__(self, model: Embedder, vectors: Mapping[str, Vectors]) -> None:
        self.model = model
        self.vectors = dict(vectors)
        self.name, self.dim, self.version = model.name, model.dim, model.version

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return self.model.embed_batch(texts)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> Vectors:
        found = self.vectors.get(text)
        return found if found is not None else self.model.embed_query(text)
