"""Mirror a folder (or one file) into a corpus, touching only what changed.

Each chunk item records its file's sha256 (`metadata.file_hash`); a file whose
chunks all carry its current hash (and the current chunker version) is not read
further. A changed file is re-chunked: chunks whose text and title are unchanged
keep their `updated_at` (and their vectors, by content hash), new ones are added,
vanished ones deleted. Files are committed as they finish (a few per transaction,
never half a file), so an interrupted run keeps its finished files and the next
run continues. A corpus remembers the folder it mirrors; indexing another folder
into it needs `replace=True`. One bad file never stops a run: it is skipped with
its reason.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..errors import InvalidInputError
from ..model import Item
from ..progress import ProgressFactory, no_progress
from ..store import KnowledgeBase
from ..validation import MAX_ID_CHARS
from .chunk import Chunk, chunk_markdown, chunk_text
from .code import chunk_code
from .formats import NotebookError, chunk_html, chunk_notebook
from .languages import FileType, looks_minified
from .walk import Loaded, Skipped, SourceFile, Unindexable, find_files, load, shown

CHUNKER_VERSION = 2  # bump when chunking changes, so unchanged files are re-chunked once
WRITE_CHUNKS = 64  # commit when this many chunks wait...
WRITE_SECONDS = 0.25  # ...or this long after the last commit: little is lost to an interrupt


class CorpusRootError(InvalidInputError):
    """Indexing a folder into a corpus that mirrors another one (it would remove that one's chunks)."""

    def __init__(self, corpus: str, old: str, new: str, items: int) -> None:
        super().__init__(
            f"corpus {corpus!r} mirrors {old} ({items} items); indexing {new} into it would remove "
            f"them. Pass --replace (replace=True) to re-point it, or use another --corpus")
        self.corpus, self.old, self.new, self.items = corpus, old, new, items


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file's effect on the corpus: added, changed or removed, and how many chunks."""

    path: str
    action: str
    added: int = 0
    updated: int = 0
    removed: int = 0

    def line(self, *, dry_run: bool = False) -> str:
        parts = [f"+{self.added}" if self.added else "", f"~{self.updated}" if self.updated else "",
                 f"-{self.removed}" if self.removed else ""]
        quiet = "lines moved" if self.action == "changed" else "no chunks"
        counts = " ".join(p for p in parts if p) or quiet
        action = _WOULD.get(self.action, f"would be {self.action}") if dry_run else self.action
        return f"{action} {self.path} ({counts})"


_WOULD = {"added": "would add", "changed": "would change", "removed": "would remove"}


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
    changes: list[FileChange] = field(default_factory=list)
    dry_run: bool = False
    interrupted: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        if self.dry_run:
            text = (f"would index {self.root} into {self.corpus!r}: {self.files_scanned} files "
                    f"({self.files_changed} to change, {self.files_unchanged} unchanged, "
                    f"{self.files_removed} to remove); would add {self.chunks_added} chunks, "
                    f"update {self.chunks_updated}, remove {self.chunks_removed}")
            return text + (f"; would skip {len(self.skipped)} files" if self.skipped else "")
        verb = "interrupted: partly indexed" if self.interrupted else "indexed"
        text = (f"{verb} {self.root} into {self.corpus!r}: {self.files_scanned} files "
                f"({self.files_changed} changed, {self.files_unchanged} unchanged, "
                f"{self.files_removed} removed); chunks {self.chunks_added} added, "
                f"{self.chunks_updated} updated, {self.chunks_removed} removed")
        return text + (f"; {len(self.skipped)} skipped" if self.skipped else "")


def chunk_file(text: str, file_type: FileType) -> list[Chunk]:
    """The chunker for a file type."""
    if file_type.language == "markdown":
        return chunk_markdown(text)
    if file_type.language == "html":
        return chunk_html(text)
    if file_type.language == "notebook":
        return chunk_notebook(text)
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


def _inferred_root(existing: dict[str, dict[str, Item]]) -> str | None:
    """The folder a corpus indexed before roots were recorded, from a chunk's file:// URL."""
    for rel, items in existing.items():
        for item in items.values():
            url = item.source_url or ""
            if url.startswith("file://"):
                path = unquote(urlsplit(url).path)
                if path.endswith("/" + rel):
                    return path[: -len(rel) - 1] or "/"
                if Path(path).name == rel:  # a corpus made of one file
                    return path
    return None


def chunk_url(source: SourceFile, chunk: Chunk, base_url: str | None) -> str:
    """`base_url/path#Lstart-Lend` with a base URL (a repository browser), else the file's URL."""
    if base_url:
        return f"{base_url.rstrip('/')}/{quote(source.rel)}#L{chunk.start_line}-L{chunk.end_line}"
    return source.path.as_uri()  # absolute: the walk resolved the root


def _is_current(old: dict[str, Item], loaded: Loaded, source: SourceFile, base_url: str | None) -> bool:
    def url_ok(it: Item) -> bool:
        lines = Chunk("", None, int(it.metadata.get("start_line", 0)), int(it.metadata.get("end_line", 0)))
        return it.source_url == chunk_url(source, lines, base_url)

    return bool(old) and all(
        it.metadata.get("file_hash") == loaded.digest and it.metadata.get("chunker") == CHUNKER_VERSION
        and it.metadata.get("chunks") == len(old) and it.kind == source.type.kind and url_ok(it)
        for it in old.values())


def _metadata(source: SourceFile, chunk: Chunk, digest: str, count: int) -> dict[str, Any]:
    data: dict[str, Any] = {"path": source.rel, "start_line": chunk.start_line, "end_line": chunk.end_line,
                            "language": source.type.language}
    if chunk.heading:
        data["symbol" if source.type.is_code else "heading"] = chunk.heading
    data.update(file_hash=digest, chunker=CHUNKER_VERSION, chunks=count)
    return data


@dataclass(slots=True)
class _Pending:
    change: FileChange
    items: list[Item]
    gone: list[str]
    unchanged: int = 0


class _Sync:
    """Turns files into writes and commits them a few files at a time."""

    def __init__(self, kb: KnowledgeBase, corpus: str, summary: IndexSummary, base_url: str | None,
                 dry_run: bool) -> None:
        self.kb, self.corpus, self.summary = kb, corpus, summary
        self.base_url, self.dry_run = base_url, dry_run
        self.pending: list[_Pending] = []
        self.last_flush = time.monotonic()

    def file(self, source: SourceFile, loaded: Loaded, old: dict[str, Item]) -> None:
        if _is_current(old, loaded, source, self.base_url):
            self.summary.files_unchanged += 1
            return
        chunks = chunk_file(loaded.text, source.type)
        ids = chunk_ids(self.corpus, source.rel, chunks, code=source.type.is_code)
        items, added, updated, unchanged = [], 0, 0, 0
        for item_id, chunk in zip(ids, chunks, strict=True):
            title = f"{source.rel} › {chunk.heading}" if chunk.heading else source.rel
            before = old.get(item_id)
            same = before is not None and before.text == chunk.text and before.title == title
            if before is None:
                added += 1
            elif same:
                unchanged += 1
            else:
                updated += 1
            items.append(Item(
                text=chunk.text, id=item_id, corpus=self.corpus, title=title, kind=source.type.kind,
                source_url=chunk_url(source, chunk, self.base_url),
                updated_at=before.updated_at if same and before else None,
                metadata=_metadata(source, chunk, loaded.digest, len(chunks))))
        new_ids = set(ids)
        gone = [item_id for item_id in old if item_id not in new_ids]
        if not items and not gone:
            self.summary.files_unchanged += 1
            return
        action = "added" if not old else "changed"
        self.pending.append(_Pending(FileChange(source.rel, action, added, updated, len(gone)),
                                     items, gone, unchanged))
        self.maybe_flush()

    def remove(self, rel: str, ids: Iterable[str], *, file_gone: bool) -> None:
        ids = list(ids)
        if ids:
            self.pending.append(_Pending(FileChange(rel, "removed", removed=len(ids)), [], ids))
        if file_gone:
            self.summary.files_removed += 1
        self.maybe_flush()

    def maybe_flush(self) -> None:
        waiting = sum(len(p.items) + len(p.gone) for p in self.pending)
        if waiting >= WRITE_CHUNKS or time.monotonic() - self.last_flush >= WRITE_SECONDS:
            self.flush()

    def flush(self) -> None:
        batch, self.pending = self.pending, []
        self.last_flush = time.monotonic()
        if not batch:
            return
        if not self.dry_run:
            try:
                self._write(batch)
            except InvalidInputError:
                for one in batch:  # find the file the store refuses; keep the others
                    try:
                        self._write([one])
                    except InvalidInputError as exc:
                        self.summary.skipped.append(Skipped(one.change.path, f"not stored: {exc}"))
                        self._count(one, ok=False)
                    else:
                        self._count(one)
                return
        for one in batch:
            self._count(one)

    def _write(self, batch: list[_Pending]) -> None:
        items = [it for one in batch for it in one.items]
        if items:
            self.kb.upsert_many(items, batch_size=len(items))
        gone = [item_id for one in batch for item_id in one.gone]
        if gone:
            self.kb.delete_many(gone)

    def _count(self, one: _Pending, ok: bool = True) -> None:
        if not ok:
            return
        change = one.change
        self.summary.chunks_added += change.added
        self.summary.chunks_updated += change.updated
        self.summary.chunks_removed += change.removed
        self.summary.chunks_unchanged += one.unchanged
        if change.action != "removed":
            self.summary.files_changed += 1
        self.summary.changes.append(change)


def corpus_root(kb: KnowledgeBase, corpus: str) -> str | None:
    """The folder (or file) a corpus mirrors: recorded by `index`, else inferred from its chunks."""
    root = kb.corpus_settings(corpus).get("root")
    if isinstance(root, str):
        return root
    return _inferred_root(_existing(kb, corpus))


def _within(path: Path, folder: str) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return Path(folder).is_dir()


def index_folder(
    kb: KnowledgeBase, root: str | Path, corpus: str, *, include: Iterable[str] = (),
    exclude: Iterable[str] = (), progress: ProgressFactory = no_progress, dry_run: bool = False,
    replace: bool = False, base_url: str | None = None, stop: Callable[[], bool] | None = None,
) -> IndexSummary:
    """Index a folder's Markdown, text and source files (or one file) into `corpus`, which mirrors it.

    Chunks of files that are gone (deleted, now ignored, excluded, or turned
    binary) are removed; files that cannot be read keep their chunks. A file inside
    the folder the corpus mirrors updates just that file. `dry_run` reports the
    changes (`changes`) without writing. On KeyboardInterrupt the finished files
    are committed, and `IndexInterrupted` (a KeyboardInterrupt) carries the summary; `stop`,
    asked between files, ends the run the same way (the CLI's Ctrl-C sets it, so a signal never
    lands inside a database call).
    """
    started = time.monotonic()
    target = Path(root).expanduser()
    if not target.exists():
        raise InvalidInputError(f"no such file or folder: {target}")
    target = target.resolve()
    existing = _existing(kb, corpus)
    settings = kb.corpus_settings(corpus)
    recorded = settings.get("root") if isinstance(settings.get("root"), str) else _inferred_root(existing)
    base_url = base_url if base_url is not None else settings.get("base_url")
    single = target.is_file()
    if single and recorded and recorded != str(target) and _within(target, recorded):
        folder = Path(recorded)  # one file of the folder this corpus mirrors
    else:
        folder = target
        count = sum(len(v) for v in existing.values())
        if recorded and recorded != str(target) and count and not replace:
            raise CorpusRootError(corpus, recorded, str(target), count)
    walked = find_files(target, include=include, exclude=exclude)
    if single:
        rel = target.relative_to(folder).as_posix() if folder != target else target.name
        walked.files = [SourceFile(rel, f.path, f.type, f.chosen) for f in walked.files]
        walked.skipped = [Skipped(rel, s.reason) for s in walked.skipped]
        existing = {k: v for k, v in existing.items() if k == rel or folder == target}
    summary = IndexSummary(corpus=corpus, root=str(target), skipped=list(walked.skipped),
                           files_scanned=len(walked.files), dry_run=dry_run)
    if not dry_run and (settings.get("root") != str(folder) or settings.get("base_url") != base_url):
        kb.set_corpus_settings(corpus, root=str(folder), base_url=base_url)
    unreadable = [s.path for s in walked.skipped if s.reason.startswith("cannot")]
    sync = _Sync(kb, corpus, summary, base_url, dry_run)
    try:
        with progress(len(walked.files), "text") as bar:
            for source in walked.files:
                if stop is not None and stop():
                    raise KeyboardInterrupt
                _one_file(sync, source, existing.pop(source.rel, {}), summary)
                bar.update(1)
        for rel, old in existing.items():
            if not any(rel == p or p == "." or (p.endswith("/") and rel.startswith(p)) for p in unreadable):
                sync.remove(rel, old, file_gone=True)
        sync.flush()
    except KeyboardInterrupt:
        sync.flush()  # the files finished before the interrupt
        summary.interrupted = True
        summary.seconds = time.monotonic() - started
        raise IndexInterrupted(summary) from None
    summary.seconds = time.monotonic() - started
    return summary


def _one_file(sync: _Sync, source: SourceFile, old: dict[str, Item], summary: IndexSummary) -> None:
    try:
        loaded = load(source.path)
        if not source.chosen and looks_minified(loaded.text, source.type):
            raise Unindexable("minified or generated (very long lines)")
        if source.type.language == "notebook":
            chunk_notebook(loaded.text)  # refuse a broken notebook before touching its old chunks
    except (Unindexable, NotebookError) as exc:
        summary.skipped.append(Skipped(shown(source.rel), str(exc)))
        sync.remove(source.rel, old, file_gone=False)
    except OSError as exc:
        summary.skipped.append(Skipped(shown(source.rel), f"cannot read: {exc.strerror or exc}"))
    else:
        if loaded.replaced:
            summary.warnings.append(f"{source.rel}: not valid UTF-8; undecodable bytes replaced")
        sync.file(source, loaded, old)


class IndexInterrupted(KeyboardInterrupt):
    """An index run stopped by Ctrl-C after committing its finished files; `.summary` says what."""

    def __init__(self, summary: IndexSummary) -> None:
        super().__init__("interrupted")
        self.summary = summary
