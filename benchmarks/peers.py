"""Same-run peers: what users would pick instead of hybridkb, over the same texts, vectors
and queries, timed in one loop with hybridkb's own searches (interleaved per query, the
order turned each query, so machine noise hits every figure alike).

- LanceDB (`pip install 'hybridkb[bench]'`): one table of (idx, text, vector), its native
  full-text index on the text, its default vector index (IVF_PQ, cosine), hybrid search
  with its default reranker (RRF).
- Chroma: a persistent collection (cosine HNSW) with the texts as documents; it has no
  ranked full-text search locally, so only its vector figures exist.

Each peer reports its ingest (vectors given; until every index it searches with is built),
its first search right after the load, its footprint on disk and its vector recall@10
against the exact numpy answer; hybridkb's figures come from the same loop.
"""

from __future__ import annotations

import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .measure import clock, stats

BATCH = 10_000


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


class LancePeer:
    name = "LanceDB"

    def __init__(self, folder: Path) -> None:
        import lancedb

        self.lancedb = lancedb
        self.folder = folder
        shutil.rmtree(folder, ignore_errors=True)
        self.table: Any = None

    @property
    def version(self) -> str:
        return str(self.lancedb.__version__)

    def ingest(self, texts: Sequence[str], vectors: np.ndarray[Any, Any]) -> None:
        import pyarrow as pa

        dim = vectors.shape[1]
        schema = pa.schema([("idx", pa.int64()), ("text", pa.string()),
                            ("vector", pa.list_(pa.float32(), dim))])
        table = self.lancedb.connect(str(self.folder)).create_table("items", schema=schema)
        for start in range(0, len(texts), BATCH):
            stop = min(len(texts), start + BATCH)
            flat = pa.array(np.ascontiguousarray(vectors[start:stop], dtype=np.float32).reshape(-1))
            table.add(pa.table({"idx": pa.array(np.arange(start, stop, dtype=np.int64)),
                                "text": pa.array(list(texts[start:stop])),
                                "vector": pa.FixedSizeListArray.from_arrays(flat, dim)}, schema=schema))
        with warnings.catch_warnings():  # create_fts_index: deprecated name, same index
            warnings.simplefilter("ignore")
            table.create_fts_index("text")
        if len(texts) >= 5_000:  # IVF_PQ wants enough rows to train its partitions
            table.create_index(metric="cosine", vector_column_name="vector")
        self.table = table

    def fts(self, text: str, k: int) -> list[int]:
        rows = self.table.search(text, query_type="fts").limit(k).select(["idx"]).to_list()
        return [int(r["idx"]) for r in rows]

    def vector(self, q: np.ndarray[Any, Any], k: int) -> list[int]:
        rows = self.table.search(q).distance_type("cosine").limit(k).select(["idx"]).to_list()
        return [int(r["idx"]) for r in rows]

    def hybrid(self, text: str, q: np.ndarray[Any, Any], k: int) -> list[int]:
        rows = (self.table.search(query_type="hybrid").vector(q).text(text).distance_type("cosine")
                .limit(k).select(["idx"]).to_list())
        return [int(r["idx"]) for r in rows]

    def reopen(self) -> None:
        self.table = self.lancedb.connect(str(self.folder)).open_table("items")

    def close(self) -> None:
        self.table = None
        shutil.rmtree(self.folder, ignore_errors=True)


class ChromaPeer:
    name = "Chroma"

    def __init__(self, folder: Path) -> None:
        import chromadb

        self.chromadb = chromadb
        self.folder = folder
        shutil.rmtree(folder, ignore_errors=True)
        self.client: Any = None
        self.collection: Any = None

    @property
    def version(self) -> str:
        return str(self.chromadb.__version__)

    def _client(self) -> Any:
        from chromadb.config import Settings

        return self.chromadb.PersistentClient(path=str(self.folder),
                                              settings=Settings(anonymized_telemetry=False))

    def ingest(self, texts: Sequence[str], vectors: np.ndarray[Any, Any]) -> None:
        self.client = self._client()
        self.collection = self.client.create_collection("items", metadata={"hnsw:space": "cosine"})
        step = min(BATCH, int(self.client.get_max_batch_size()))
        for start in range(0, len(texts), step):
            stop = min(len(texts), start + step)
            self.collection.add(ids=[str(i) for i in range(start, stop)],
                                embeddings=np.ascontiguousarray(vectors[start:stop], dtype=np.float32),
                                documents=list(texts[start:stop]))

    fts = None  # no ranked full text locally (a document filter only)
    hybrid = None

    def vector(self, q: np.ndarray[Any, Any], k: int) -> list[int]:
        found = self.collection.query(query_embeddings=[q.astype(np.float32)], n_results=k,
                                      include=[])
        return [int(i) for i in found["ids"][0]]

    def reopen(self) -> None:
        self.collection = self._client().get_collection("items")

    def close(self) -> None:
        self.collection = None
        self.client = None
        shutil.rmtree(self.folder, ignore_errors=True)


PEERS: dict[str, Callable[[Path], Any]] = {"lancedb": LancePeer, "chroma": ChromaPeer}


def available() -> list[str]:
    """The peers whose packages are installed (the `bench` extra)."""
    import importlib.util

    modules = {"lancedb": "lancedb", "chroma": "chromadb"}
    return [name for name, module in modules.items() if importlib.util.find_spec(module) is not None]


def measure(workdir: Path, kb: Any, texts: Sequence[str], vectors: np.ndarray[Any, Any],
            queries: Sequence[str], query_vectors: np.ndarray[Any, Any], truth: Sequence[Sequence[int]],
            our_vector: Callable[[np.ndarray[Any, Any]], list[int]],
            *, limit: int, warmup: int, hybridkb_ingest_s: float, hybridkb_first_fts_s: float,
            hybridkb_bytes: int, names: Sequence[str] | None = None,
            stored_truth: Sequence[Sequence[int]] | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build each installed peer, then time every engine's searches query by query.
    `our_vector(q)`: hybridkb's vector index's top `limit` as item positions (the peers'
    keys), for its recall (the pipeline's collapse of near-duplicates aside). `truth`: each
    query's exact top `limit` over the vectors given (computed before, so the exact
    matrix need not stay in memory beside the engines); `stored_truth`: the same over the
    values hybridkb stores (int8 and a scale a row), for its second reading: what its
    index finds of its own exact answer, and `vector_recall@10_ceiling`: what that exact
    answer holds of the float32 one (int8 storage's cost, whatever the index's effort:
    storage/indexes/vector_recall.py)."""
    n = len(texts)
    out: dict[str, Any] = {"hybridkb": {"ingest_s": round(hybridkb_ingest_s, 3),
                                        "items_per_s": round(n / hybridkb_ingest_s, 1),
                                        "first_fts_s": round(hybridkb_first_fts_s, 4),
                                        "disk_bytes": hybridkb_bytes}}
    if stored_truth is not None:
        out["hybridkb"]["vector_recall@10_ceiling"] = round(float(np.mean(
            [len(set(own) & set(want)) / max(1, len(want))
             for own, want in zip(stored_truth, truth, strict=True)])), 4)
    peers = []
    for name in available() if names is None else names:
        log(f"peer {name}: ingest of {n:,} items (vectors given) and its indexes")
        peer = PEERS[name](workdir / f"peer-{name}-{n}")
        _, seconds = clock(peer.ingest, texts, vectors)
        first: dict[str, float] = {}
        if peer.fts is not None:
            first["first_fts_s"] = round(clock(peer.fts, queries[0], limit)[1], 4)
        first["first_vector_s"] = round(clock(peer.vector, query_vectors[0], limit)[1], 4)
        peer.reopen()
        first["reopened_first_vector_s"] = round(clock(peer.vector, query_vectors[0], limit)[1], 4)
        out[name] = {"version": peer.version, "ingest_s": round(seconds, 3),
                     "items_per_s": round(n / seconds, 1), **first,
                     "disk_bytes": folder_bytes(peer.folder)}
        peers.append((name, peer))

    times: dict[str, list[float]] = {}
    recall: dict[str, list[float]] = {}

    def timed(key: str, fn: Callable[..., Any], *args: Any) -> Any:
        got, t = clock(fn, *args)
        times.setdefault(key, []).append(t)
        return got

    def ours(text: str, qv: np.ndarray[Any, Any], want: set[int], own: set[int] | None) -> None:
        timed("hybridkb fts", lambda: kb.search(text, mode="fts", limit=limit))
        timed("hybridkb vector", lambda: kb.search(text, mode="vector", limit=limit))
        got = set(our_vector(qv))
        recall.setdefault("hybridkb", []).append(len(got & want) / max(1, len(want)))
        if own is not None:
            recall.setdefault("hybridkb stored", []).append(len(got & own) / max(1, len(own)))
        timed("hybridkb hybrid", lambda: kb.search(text, limit=limit))

    def theirs(name: str, peer: Any, text: str, qv: np.ndarray[Any, Any], want: set[int]) -> None:
        if peer.fts is not None:
            timed(f"{name} fts", peer.fts, text, limit)
        got = timed(f"{name} vector", peer.vector, qv, limit)
        recall.setdefault(name, []).append(len(set(got) & want) / max(1, len(want)))
        if peer.hybrid is not None:
            timed(f"{name} hybrid", peer.hybrid, text, qv, limit)

    pairs = list(zip(queries, query_vectors, strict=True))
    for round_, selected in (("warm-up", pairs[:warmup]), ("timed", pairs)):
        times.clear()
        recall.clear()
        for i, (text, qv) in enumerate(selected):
            want = set(truth[i])
            own = None if stored_truth is None else set(stored_truth[i])
            engines: list[str | None] = [None] + [name for name, _ in peers]
            turn = i % len(engines)
            for engine in engines[turn:] + engines[:turn]:
                if engine is None:
                    ours(text, qv, want, own)
                else:
                    theirs(engine, dict(peers)[engine], text, qv, want)
        log(f"  peers: {round_} round of {len(selected)} queries done")
    for key, values in times.items():
        engine, mode = key.rsplit(" ", 1)
        out[engine][mode] = stats(values)
    for engine, values in recall.items():
        name, _, stored = engine.partition(" ")
        key = "vector_recall@10_of_stored" if stored else "vector_recall@10"
        out[name][key] = round(float(np.mean(values)), 4)
    for _, peer in peers:
        peer.close()
    out["queries"] = len(pairs)
    out["note"] = ("interleaved per query, the engines' order turned each query; recall@10 "
                   "against numpy's exact top 10 (hybridkb: its vector index's, the pipeline's "
                   "collapse of near-duplicates aside); hybridkb's times are whole kb.search calls")
    out["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return out
