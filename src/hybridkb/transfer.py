"""Export, import and migrate: a store as JSON Lines, one item per line. No SQL here.

An export starts with a header line, then one object per item with every `Item`
field (timestamps as epoch seconds) and, when asked, its `vector`:

    {"hybridkb_export": 1, "embedder": "hashing-64@1", "vector_dim": 64, "label_templates": {}}
    {"id": "m1", "corpus": "ops", "text": "...", "created_at": 1714550400.0, ..., "vector": [...]}

Import reads that, or plain item JSONL (no header; BEIR's `_id` is accepted). Vectors
are kept when the header names the model the target store uses, and dropped (the
target embeds the text) otherwise. Import is all-or-nothing for bad input: every line
is checked before anything is written; `skip_bad` writes the good lines and reports
the others instead.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .errors import HybridKBError, InvalidInputError
from .model import Item
from .store import KnowledgeBase
from .validation import check_batch_size, check_metadata

EXPORT_FORMAT = 1
HEADER_KEY = "hybridkb_export"

Progress = Callable[[int], None]
# (where, record): `where` names the record in messages, e.g. "items.jsonl:12".
Records = Iterator[tuple[str, dict[str, Any]]]


@dataclass(slots=True)
class ExportHeader:
    """What an export says about the store it came from."""

    embedder: str | None = None
    vector_dim: int | None = None
    label_templates: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {HEADER_KEY: EXPORT_FORMAT, "embedder": self.embedder, "vector_dim": self.vector_dim,
                "label_templates": self.label_templates}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportHeader:
        version = data.get(HEADER_KEY)
        if version != EXPORT_FORMAT:
            raise InvalidInputError(
                f"unsupported export format {version!r}; this hybridkb reads format {EXPORT_FORMAT}")
        embedder, dim = data.get("embedder"), data.get("vector_dim")
        labels = data.get("label_templates") or {}
        if embedder is not None and not isinstance(embedder, str):
            raise InvalidInputError("export header: embedder must be a string")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise InvalidInputError("export header: vector_dim must be an integer")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise InvalidInputError("export header: label_templates must map corpora to strings")
        return cls(embedder, dim, dict(labels))


@dataclass(slots=True)
class ImportReport:
    imported: int = 0
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- export ------------------------------------------------------------------------------------


def header_for(kb: KnowledgeBase) -> ExportHeader:
    return ExportHeader(embedder=kb.embedder_name, vector_dim=kb.vector_dim,
                        label_templates=kb.label_templates())


def item_record(item: Item, vector: Iterable[float] | None = None) -> dict[str, Any]:
    data = item.to_dict()
    if vector is not None:
        data["vector"] = [float(x) for x in vector]
    return data


def export_records(
    kb: KnowledgeBase, *, vectors: bool = False, corpora: Sequence[str] | None = None,
    batch_size: int = 500,
) -> Iterator[dict[str, Any]]:
    """The header, then every item (expired and stale ones too), in storage order.

    Each batch is read consistently; a store written to meanwhile may be exported
    with some of those writes and not others.
    """
    yield header_for(kb).to_dict()
    for batch in kb.export_batches(batch_size=batch_size, vectors=vectors, corpora=corpora):
        for item, vector in batch:
            yield item_record(item, vector)


def write_export(
    kb: KnowledgeBase, out: IO[str], *, vectors: bool = False, corpora: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> int:
    """Write the export to a text stream; returns how many items were written."""
    records = export_records(kb, vectors=vectors, corpora=corpora)
    out.write(json.dumps(next(records), ensure_ascii=False) + "\n")
    n = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
        n += 1
        if progress:
            progress(1)
    return n


# -- reading files -------------------------------------------------------------------------------


def read_jsonl(path: Path, skip_bad: bool, errors: list[str]) -> Records:
    """Records of a JSONL file (gzip when it ends in .gz); a bad line raises or is reported."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    obj = json.loads(raw.decode("utf-8"))
                    if not isinstance(obj, dict):
                        raise InvalidInputError("not a JSON object")
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError,
                        InvalidInputError) as exc:
                    message = f"{where}: {exc}"
                    if not skip_bad:
                        raise InvalidInputError(message) from exc
                    errors.append(message)
                    continue
                yield where, obj
    except (OSError, EOFError, gzip.BadGzipFile) as exc:  # a truncated or fake .gz
        raise InvalidInputError(f"{path}: {exc}") from exc


def normalize_record(obj: dict[str, Any], corpus: str | None) -> dict[str, Any]:
    """Our item fields from one line: BEIR's `_id` becomes `id`; `corpus` overrides the file's."""
    obj = dict(obj)
    if "_id" in obj:
        obj["id"] = str(obj.pop("_id"))
    if obj.get("metadata") is not None:
        check_metadata(obj["metadata"])
    if corpus:
        obj["corpus"] = corpus
    return obj


# -- import ----------------------------------------------------------------------------------


def _vector_policy(kb: KnowledgeBase, header: ExportHeader | None, report: ImportReport) -> bool:
    """Whether vectors in the records are kept: only when they come from the target's model."""
    if header is None:
        return True  # plain item JSONL: the caller's vectors, checked like any other
    if header.embedder is not None and kb.has_vectors and header.embedder == kb.embedder_name:
        return True
    if header.embedder is not None:
        target = kb.embedder_name if kb.has_vectors else "no model"
        report.notes.append(f"vectors of {header.embedder} dropped: the target store uses {target}")
    return False


def import_records(
    kb: KnowledgeBase, open_records: Callable[[], Records], *, batch_size: int = 256,
    skip_bad: bool = False, corpus: str | None = None, progress: Progress | None = None,
) -> ImportReport:
    """Upsert every record into `kb`; `open_records` is called once per pass over the input.

    Without `skip_bad`, a first pass checks every record (fields, vectors, ids seen
    twice) and raises naming the first bad one before anything is written. With it,
    bad records are reported in `ImportReport.skipped` and the rest are written.
    Each batch is one transaction; an interrupted import can simply be run again.
    """
    check_batch_size(batch_size)
    report = ImportReport()
    header: ExportHeader | None = None
    keep_vectors = True

    def items(records: Records) -> Iterator[tuple[str, dict[str, Any]]]:
        nonlocal header, keep_vectors
        first = True
        for where, obj in records:
            if first and HEADER_KEY in obj:
                header = ExportHeader.from_dict(obj)
                keep_vectors = _vector_policy(kb, header, report)
                first = False
                continue
            first = False
            try:
                record = normalize_record(obj, corpus)
            except InvalidInputError as exc:
                if not skip_bad:
                    raise InvalidInputError(f"{where}: {exc}") from exc
                report.skipped.append(f"{where}: {exc}")
                continue
            if not keep_vectors:
                record.pop("vector", None)
            yield where, record

    if not skip_bad:
        seen: dict[str, str] = {}
        for where, record in items(open_records()):
            try:
                kb.check_item(record)
            except HybridKBError as exc:
                raise type(exc)(f"{where}: {exc}") from exc
            item_id = record.get("id")
            if isinstance(item_id, str):
                if item_id in seen:
                    raise InvalidInputError(f"{where}: id {item_id!r} also appears at {seen[item_id]}")
                seen[item_id] = where
        report.notes.clear()

    batch: list[tuple[str, dict[str, Any]]] = []

    def flush() -> None:
        if not batch:
            return
        try:
            report.imported += len(kb.upsert_many([r for _, r in batch], batch_size=len(batch)))
        except InvalidInputError:
            if not skip_bad:
                raise
            for where, one in batch:  # find the bad ones, keep the rest
                try:
                    report.imported += len(kb.upsert_many([one]))
                except InvalidInputError as exc:
                    report.skipped.append(f"{where}: {exc}")
        if progress:
            progress(len(batch))
        batch.clear()

    for entry in items(open_records()):
        batch.append(entry)
        if len(batch) >= batch_size:
            flush()
    flush()
    if header is not None:
        for name, template in header.label_templates.items():
            try:
                kb.set_label_template(name, template)
            except InvalidInputError as exc:
                report.notes.append(f"label template of {name!r} not kept: {exc}")
    return report


def import_file(
    kb: KnowledgeBase, path: Path, *, batch_size: int = 256, skip_bad: bool = False,
    corpus: str | None = None, progress: Progress | None = None,
) -> ImportReport:
    """Import a JSONL file (an export, or plain items); see `import_records`."""
    errors: list[str] = []
    report = import_records(kb, lambda: read_jsonl(path, skip_bad, errors), batch_size=batch_size,
                            skip_bad=skip_bad, corpus=corpus, progress=progress)
    # with skip_bad the file is read once, so each bad line is reported once
    report.skipped[:0] = errors
    return report


# -- migrate ---------------------------------------------------------------------------------


def migrate(
    source: KnowledgeBase, target: KnowledgeBase, *, vectors: bool = True, batch_size: int = 256,
    progress: Progress | None = None,
) -> ImportReport:
    """Copy every item of `source` into an empty `target` (another backend, or another file).

    Vectors travel along when both stores use the same model, so nothing is
    re-embedded; otherwise the target embeds the text. The source is not changed.
    """
    if target.count():
        raise InvalidInputError(
            f"the target store {target.target!r} already holds {target.count()} items; "
            f"migrate only into an empty store")
    if source.target == target.target:
        raise InvalidInputError("the source and the target are the same store")
    model = source.embedder_name
    if vectors and source.vector_dim is not None and model != target.embedder_name:
        raise InvalidInputError(
            f"the source store was embedded with {model or 'an unrecorded model'} but the target "
            f"uses {target.embedder_name or 'no model'}; open both with the source's model to "
            f"copy its vectors, or copy without vectors to embed the text again")

    def records() -> Records:
        for n, record in enumerate(export_records(source, vectors=vectors)):
            yield f"item {n}" if n else "header", record

    report = import_records(target, records, batch_size=batch_size, progress=progress)
    if target.count() != source.count():
        report.notes.append(f"the source changed during the copy: it holds {source.count()} items, "
                            f"the target {target.count()}")
    return report

