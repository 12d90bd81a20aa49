"""Benchmark data: N distinct items grown from the BEIR texts, and a query set.

The distinct source documents (SciFact + NFCorpus) are embedded once and cached
(hybridkb.evaluation.cache, the same entries the eval runner uses). Item i is
copy `i // S` of source `i % S`: copy 0 is the source as it is; later copies get
about 12% of their words replaced by words of another source, a copy number appended, and the
source vector plus small Gaussian noise, renormalized. The noise stream is one
seeded generator, so the first N items are the same for every larger N.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hybridkb.embedding import Embedder
from hybridkb.evaluation.beir import file_sha256, load
from hybridkb.evaluation.cache import EmbeddingCache, cached_embed

Matrix = npt.NDArray[np.float32]

DEFAULT_DATASETS = (Path("/work/shared/data/scifact"), Path("/work/shared/data/nfcorpus"))
CORPUS = "bench"
SEED = 20_241_122
NOISE = 0.15  # expected norm of the noise added to a unit source vector (cosine ~0.99)
# Words of a copy replaced by another source's words: enough that a copy's token
# Jaccard to its source stays under the pipeline's 0.90 near-duplicate threshold,
# so the default search does its full work and returns full pages.
REPLACED_FRACTION = 0.12
MIN_REPLACED = 3


@dataclass(frozen=True, slots=True)
class Source:
    dataset: str
    id: str
    title: str | None
    text: str


@dataclass(slots=True)
class BenchData:
    sources: list[Source]
    source_vectors: Matrix
    queries: list[str]
    query_vectors: Matrix
    model_id: str
    dim: int
    embed_seconds: float  # model time spent filling the cache in this run (0 when all cached)
    cached: bool

    def describe(self) -> dict[str, Any]:
        per_dataset: dict[str, int] = {}
        for s in self.sources:
            per_dataset[s.dataset] = per_dataset.get(s.dataset, 0) + 1
        return {"sources": len(self.sources), "per_dataset": per_dataset,
                "queries": len(self.queries), "model": self.model_id, "dim": self.dim,
                "embeddings_cached": self.cached,
                "embed_seconds_this_run": round(self.embed_seconds, 1)}


def load_data(
    folders: Sequence[Path], embedder: Embedder, *, n_queries: int, cache: EmbeddingCache | None,
) -> BenchData:
    """Sources and their vectors, and `n_queries` test queries taken round-robin
    from the datasets (so each dataset is represented), with their vectors."""
    sources: list[Source] = []
    blocks: list[Matrix] = []
    query_lists: list[list[tuple[str, Matrix]]] = []
    seconds, cached = 0.0, True
    for folder in folders:
        data = load(folder, "test")
        docs = cached_embed(
            embedder, kind="corpus", source_sha=file_sha256(data.corpus_file),
            ids=[d.id for d in data.corpus], texts=[d.embedding_text for d in data.corpus],
            cache=cache)
        queries = cached_embed(
            embedder, kind="queries", source_sha=file_sha256(data.queries_file),
            ids=[q.id for q in data.queries], texts=[q.text for q in data.queries], cache=cache)
        seconds += docs.seconds + queries.seconds
        cached = cached and docs.cached and queries.cached
        sources.extend(Source(data.name, d.id, d.title, d.text) for d in data.corpus)
        blocks.append(docs.vectors)
        query_lists.append([(q.text, queries.vectors[i]) for i, q in enumerate(data.queries)])
    picked: list[tuple[str, Matrix]] = []
    seen: set[str] = set()
    for row in range(max((len(q) for q in query_lists), default=0)):
        for qs in query_lists:
            if row < len(qs) and qs[row][0] not in seen:
                seen.add(qs[row][0])
                picked.append(qs[row])
    if len(picked) < n_queries:
        raise ValueError(f"asked for {n_queries} queries; the datasets have {len(picked)}")
    picked = picked[:n_queries]
    return BenchData(
        sources=sources, source_vectors=np.vstack(blocks).astype(np.float32),
        queries=[t for t, _ in picked],
        query_vectors=np.vstack([v for _, v in picked]).astype(np.float32),
        model_id=embedder.model_id, dim=embedder.dim, embed_seconds=seconds, cached=cached)


def item_vectors(data: BenchData, n: int) -> Matrix:
    """Unit vectors of items 0..n-1 (a prefix of the same stream for every n)."""
    s, dim = len(data.sources), data.dim
    out = np.empty((n, dim), dtype=np.float32)
    rng = np.random.default_rng(SEED)
    step = 8192
    for start in range(0, n, step):
        stop = min(n, start + step)
        idx = np.arange(start, stop)
        noise = rng.standard_normal((stop - start, dim), dtype=np.float32) * (NOISE / np.sqrt(dim))
        noise[idx < s] = 0.0  # copy 0 keeps its source vector
        block = data.source_vectors[idx % s] + noise
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def _perturb(text: str, i: int, copy: int, donor: str) -> str:
    if copy == 0:
        return text
    words = text.split()
    spare = donor.split() or ["variant"]
    for k in range(min(len(words), max(MIN_REPLACED, round(REPLACED_FRACTION * len(words))))):
        pos = (i * 2_654_435_761 + k * 40_503) % len(words)
        words[pos] = spare[(i + 7 * k) % len(spare)]
    return " ".join(words) + f" (copy {copy})"


def make_items(data: BenchData, n: int, vectors: Matrix | None = None,
               *, start: int = 0) -> list[dict[str, Any]]:
    """Item dicts for items start..start+n-1, each with its "vector" when given
    (`vectors` row r belongs to item start + r)."""
    s = len(data.sources)
    items: list[dict[str, Any]] = []
    for i in range(start, start + n):
        src, copy = data.sources[i % s], i // s
        donor = data.sources[(i * 31 + 17) % s].text
        item: dict[str, Any] = {
            "id": f"{src.dataset}:{src.id}:{copy}", "corpus": CORPUS, "title": src.title,
            "text": _perturb(src.text, i, copy, donor),
            "metadata": {"dataset": src.dataset, "copy": copy},
        }
        if vectors is not None:
            item["vector"] = vectors[i - start]
        items.append(item)
    return items


def item_texts(items: Sequence[dict[str, Any]]) -> list[str]:
    """What the store indexes and embeds: title and text (Item.embedding_text)."""
    return [f"{it['title']} {it['text']}" if it.get("title") else it["text"] for it in items]

