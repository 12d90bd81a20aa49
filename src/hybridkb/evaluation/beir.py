"""Load a dataset in the BEIR layout: corpus, queries and one split's relevance judgments.

    folder/corpus.jsonl[.gz]   {"_id", "title", "text", "metadata"} per line
    folder/queries.jsonl[.gz]  {"_id", "text", "metadata"} per line
    folder/qrels/<split>.tsv   query-id, corpus-id, score (a header row first)
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError

Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    title: str | None
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def embedding_text(self) -> str:
        """What the store embeds for this document (Item.embedding_text)."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Dataset:
    """One split of a BEIR dataset. `queries` holds the judged queries, in qrels order."""

    name: str
    split: str
    corpus_file: Path
    queries_file: Path
    corpus: list[Document]
    queries: list[Query]
    qrels: Qrels
    skipped_queries: int = 0  # judged queries without a relevant doc or without a text
    skipped_docs: int = 0  # documents with neither title nor text
    generated: int = 0  # documents at the end of `corpus` that are not in corpus_file


def _find(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    raise InvalidInputError(f"{folder} has no {stem}.jsonl or {stem}.jsonl.gz")


def _open(path: Path) -> gzip.GzipFile | io.BufferedReader:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with _open(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InvalidInputError(f"{path}:{number}: {exc}") from exc
            if not isinstance(obj, dict) or "_id" not in obj:
                raise InvalidInputError(f"{path}:{number}: expected a JSON object with an _id")
            yield obj


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def load_corpus(path: Path) -> tuple[list[Document], int]:
    """Documents in file order, and how many were skipped for having no text at all."""
    docs: list[Document] = []
    skipped = 0
    for obj in _jsonl(path):
        title = str(obj.get("title") or "").strip() or None
        text = str(obj.get("text") or "")
        if not text.strip():
            if title is None:
                skipped += 1
                continue
            text, title = title, None  # the store needs a text; the title then stands in
        docs.append(Document(str(obj["_id"]), title, text, _metadata(obj)))
    return docs, skipped


def load_queries(path: Path) -> dict[str, Query]:
    return {str(o["_id"]): Query(str(o["_id"]), str(o.get("text") or ""), _metadata(o))
            for o in _jsonl(path)}


def load_qrels(path: Path) -> Qrels:
    """query id -> {doc id: relevance}, queries in the order they first appear."""
    if not path.is_file():
        raise InvalidInputError(f"no relevance judgments at {path}")
    qrels: Qrels = {}
    with path.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle, delimiter="\t")
        next(rows, None)  # the header row
        for number, row in enumerate(rows, start=2):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 3:
                raise InvalidInputError(f"{path}:{number}: expected query-id, corpus-id, score")
            try:
                score = int(float(row[2]))
            except ValueError as exc:
                raise InvalidInputError(
                    f"{path}:{number}: score {row[2]!r} is not a number") from exc
            qrels.setdefault(row[0], {})[row[1]] = score
    return qrels


def load(folder: str | Path, split: str = "test") -> Dataset:
    """Load `folder` (BEIR layout) for one split. Judged queries with no relevant
    document are skipped, as BEIR does; so are judged ids missing from queries.jsonl."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInputError(f"dataset folder {root} does not exist")
    corpus_file, queries_file = _find(root, "corpus"), _find(root, "queries")
    qrels = load_qrels(root / "qrels" / f"{split}.tsv")
    all_queries = load_queries(queries_file)
    corpus, skipped_docs = load_corpus(corpus_file)
    queries = [all_queries[qid] for qid, judged in qrels.items()
               if qid in all_queries and all_queries[qid].text.strip()
               and any(rel > 0 for rel in judged.values())]
    kept = {q.id for q in queries}
    return Dataset(
        name=root.resolve().name, split=split, corpus_file=corpus_file, queries_file=queries_file,
        corpus=corpus, queries=queries, qrels={q: d for q, d in qrels.items() if q in kept},
        skipped_queries=len(qrels) - len(queries), skipped_docs=skipped_docs,
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
