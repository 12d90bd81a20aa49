"""Mirror a folder into a corpus, touching only what changed.

Each chunk item records its file's sha256 (`metadata.file_hash`); a file whose
chunks all carry its current hash (and the current chunker version) is not read
further. A changed file is re-chunked: chunks whose text and title are unchanged
keep their `updated_at` (and their vectors, by content hash), new ones are added,
vanished ones deleted. All chunks of one file are written in one transaction.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..model import Item
from ..progress import ProgressFactory, no_progress
from ..store import KnowledgeBase
from ..validation import MAX_ID_CHARS
from .chunk import Chunk, chunk_markdown, chunk_text
from .code import chunk_code
from .languages import FileType
from .walk import Loaded, Skipped, SourceFile, Unindexable, find_files, load

CHUNKER_VERSION = 1  # bump when chunking changes, so unchanged files are re-chunked once
WRITE_BATCH = 256


@dataclass(slots=True)
class IndexSummary:
    """What one run did. `chunks_unchanged` counts chunks of changed files that stayed the same."""

    corpus: str
    root: str
    files_scanned: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    chunks_added: int = 0
    chunks_updated: int = 0
    chunks_unchanged: int = 0
    chunks_removed: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        text = (f"indexed {self.root} into {self.corpus!r}: {self.files_scanned} files "
                f"({self.files_changed} changed, {self.files_unchanged} unchanged, "
                f"{self.files_removed} removed); chunks {self.chunks_added} added, "
                f"{self.chunks_updated} updated, {self.chunks_removed} removed")
        return text + (f"; {len(self.skipped)} skipped" if self.skipped else "")


def chunk_file(text: str, file_type: FileType) -> list[Chunk]:
    """The chunker for a file type."""
    if file_type.language == "markdown":
        return chunk_markdown(text)
    if file_type.is_code:
        return chunk_code(text, file_type.language)
    return chunk_text(text)


_NOT_SLUG = re.compile(r"[^\w\- ]+")


def _key(heading: str | None, code: bool) -> str:
    """A symbol as written; a heading path as anchors ("Get Started > FAQ" -> get-started/faq)."""
    if not heading:
        return "top"
    if code:
        return "-".join(heading.split())
    parts = ("-".join(_NOT_SLUG.sub("", part).lower().split()) for part in heading.split(" > "))
    return "/".join(part or "section" for part in parts)


def chunk_ids(corpus: str, rel: str, chunks: Iterable[Chunk], *, code: bool = False) -> list[str]:
    """Ids named by path and heading/symbol, so an edit above a chunk does not rename it.

    `corpus:src/app.py#Server.run`, `corpus:docs/guide.md#guide/install`; repeated
    names (overloads, parts of a long section, unnamed code) get `~2`, `~3`...
    """
    used: set[str] = set()
    ids = []
    for chunk in chunks:
        base = f"{corpus}:{rel}#{_key(chunk.heading, code)}"
        if len(base) > MAX_ID_CHARS - 8:
            base = f"{corpus}:{hashlib.sha256(base.encode()).hexdigest()}"
        item_id, n = base, 1
        while item_id in used:
            n += 1
            item_id = f"{base}~{n}"
        used.add(item_id)
        ids.append(item_id)
    return ids


def _existing(kb: KnowledgeBase, corpus: str) -> dict[str, dict[str, Item]]:
    """This corpus's chunk items by file path. Items we did not write (no file_hash) are left alone."""
    found: dict[str, dict[str, Item]] = defaultdict(dict)
    for item in kb.iter_items():
        path = item.metadata.get("path")
        if item.corpus == corpus and isinstance(path, str) and "file_hash" in item.metadata:
            found[path][item.id] = item
    return found


def _is_current(old: dict[str, Item], loaded: Loaded, url: str, file_type: FileType) -> bool:
    return bool(old) and all(
        it.metadata.get("file_hash") == loaded.digest and it.metadata.get("chunker") == CHUNKER_VERSION
        and it.metadata.get("chunks") == len(old) and it.source_url == url and it.kind == file_type.kind
        for it in old.values())


def _metadata(source: SourceFile, chunk: Chunk, digest: str, count: int) -> dict[str, Any]:
    data: dict[str, Any] = {"path": source.rel, "start_line": chunk.start_line, "end_line": chunk.end_line,
                            "language": source.type.language}
    if chunk.heading:
        data["symbol" if source.type.is_code else "heading"] = chunk.heading
    data.update(file_hash=digest, chunker=CHUNKER_VERSION, chunks=count)
    return data


class _Sync:
    def __init__(self, kb: KnowledgeBase, corpus: str, summary: IndexSummary) -> None:
        self.kb, self.corpus, self.summary = kb, corpus, summary
        self.pending: list[Item] = []
        self.doomed: list[str] = []

    def file(self, source: SourceFile, loaded: Loaded, old: dict[str, Item]) -> None:
        url = source.path.as_uri()  # absolute: the walk resolved the root
        if _is_current(old, loaded, url, source.type):
            self.summary.files_unchanged += 1
            return
        chunks = chunk_file(loaded.text, source.type)
        ids = chunk_ids(self.corpus, source.rel, chunks, code=source.type.is_code)
        items = []
        for item_id, chunk in zip(ids, chunks, strict=True):
            title = f"{source.rel} › {chunk.heading}" if chunk.heading else source.rel
            before = old.get(item_id)
            same = before is not None and before.text == chunk.text and before.title == title
            if before is None:
                self.summary.chunks_added += 1
            elif same:
                self.summary.chunks_unchanged += 1
            else:
                self.summary.chunks_updated += 1
            items.append(Item(
                text=chunk.text, id=item_id, corpus=self.corpus, title=title, kind=source.type.kind,
                source_url=url, updated_at=before.updated_at if same and before else None,
                metadata=_metadata(source, chunk, loaded.digest, len(chunks))))
        new_ids = set(ids)
        gone = [item_id for item_id in old if item_id not in new_ids]
        self.summary.chunks_removed += len(gone)
        self.doomed.extend(gone)
        if items or gone:
            self.summary.files_changed += 1
        else:
            self.summary.files_unchanged += 1
        self.pending.extend(items)  # one file's chunks never straddle two transactions
        if len(self.pending) >= WRITE_BATCH:
            self.flush()

    def remove(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        self.summary.chunks_removed += len(ids)
        self.doomed.extend(ids)

    def flush(self) -> None:
        if self.pending:
            self.kb.upsert_many(self.pending, batch_size=len(self.pending))
            self.pending = []
        if self.doomed:
            self.kb.delete_many(self.doomed)
            self.doomed = []


def index_folder(
    kb: KnowledgeBase, root: str | Path, corpus: str, *, include: Iterable[str] = (),
    exclude: Iterable[str] = (), progress: ProgressFactory = no_progress,
) -> IndexSummary:
    """Index a folder's Markdown, text and source files into `corpus`, which then mirrors it.

    Chunks of files that are gone (deleted, now ignored, excluded, or turned
    binary) are removed; files that cannot be read keep their chunks.
    """
    folder = Path(root)
    if not folder.is_dir():
        raise NotADirectoryError(f"not a folder: {folder}")
    walked = find_files(folder, include=include, exclude=exclude)
    summary = IndexSummary(corpus=corpus, root=str(folder.resolve()), skipped=list(walked.skipped),
                           files_scanned=len(walked.files))
    existing = _existing(kb, corpus)
    unreadable = [s.path for s in walked.skipped if s.reason.startswith("cannot")]
    sync = _Sync(kb, corpus, summary)
    with progress(len(walked.files), "indexing") as bar:
        for source in walked.files:
            old = existing.pop(source.rel, {})
            try:
                loaded = load(source.path)
            except Unindexable as exc:
                summary.skipped.append(Skipped(source.rel, str(exc)))
                sync.remove(old)
            except OSError as exc:
                summary.skipped.append(Skipped(source.rel, f"cannot read: {exc.strerror or exc}"))
            else:
                if loaded.replaced:
                    summary.warnings.append(f"{source.rel}: not valid UTF-8; undecodable bytes replaced")
                sync.file(source, loaded, old)
            bar.update(1)
    for rel, old in existing.items():
        if not any(rel == p or p == "." or (p.endswith("/") and rel.startswith(p)) for p in unreadable):
            summary.files_removed += 1
            sync.remove(old)
    sync.flush()
    return summary
