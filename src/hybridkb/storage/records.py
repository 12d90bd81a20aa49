"""What every dialect stores the same way, written once.

The item columns and the row <-> item mapping, the rule for replacing an existing item,
the filter conditions (a dialect supplies its SQL fragments), the integrity rules, the
re-embed state machine, the meta keys and the default BM25 column weights. Dialects
(sqlite/, postgres/) keep only their SQL and connection handling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from ..dedup import word_print
from ..errors import DimensionMismatchError, InvalidFilterError, StoreError
from ..model import Item, StoredItem
from ..querysyntax import TextMatch
from .contract import SearchArea
from .textcodec import unpack

# -- meta keys: what the store records about itself ----------------------------------------

META_EMBEDDER = "embedder"  # model id of the stored vectors ("name@version")
META_EMBEDDER_NAME = "embedder_name"
META_EMBEDDER_VERSION = "embedder_version"
META_VECTOR_DIM = "vector_dim"  # set with the vector table, by the dialect
META_PENDING_EMBEDDER = "pending_embedder"  # a re-embedding in progress: the model...
META_PENDING_VECTOR_DIM = "pending_vector_dim"  # ...and its dimension
META_LABEL_TEMPLATES = "label_templates"  # JSON: corpus -> source label template
PENDING_KEYS = (META_PENDING_EMBEDDER, META_PENDING_VECTOR_DIM)

# BM25 column weights (title, text), chosen by the evaluation harness (docs/quality.md).
DEFAULT_BM25_WEIGHTS = (2.0, 1.0)

# -- columns and rows ------------------------------------------------------------------------

ITEM_COLUMNS = (
    "id", "corpus", "title", "text", "kind", "scope", "repo", "namespace", "source_url",
    "metadata", "created_at", "updated_at", "expires_at", "access_count", "last_accessed_at",
    "stale",
)
# Read with the item: the hash of its word set (dedup.word_print; NULL in rows written
# before the column existed), so a search's duplicate collapse need not tokenize the text.
READ_COLUMNS = (*ITEM_COLUMNS, "word_print")
# Written beside the item: the hash of its embedding text, the hash its vector was
# computed from (NULL: no current vector), and its word print.
WRITE_COLUMNS = (*ITEM_COLUMNS, "content_hash", "embedded_hash", "word_print")
# Replacing an item keeps when it was created and how it was used.
_KEPT_ON_REPLACE = frozenset({"id", "created_at", "access_count", "last_accessed_at"})

# An existing row takes the new values but keeps created_at, access_count and
# last_accessed_at, and keeps its vector (embedded_hash) when its content hash is unchanged.
ON_CONFLICT_REPLACE = (
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*ITEM_COLUMNS, "content_hash", "word_print")
                if c not in _KEPT_ON_REPLACE)
    + ", embedded_hash = CASE WHEN excluded.embedded_hash IS NOT NULL THEN excluded.embedded_hash "
    "WHEN items.content_hash = excluded.content_hash THEN items.embedded_hash ELSE NULL END"
)


def set_meta_sql(mark: str) -> str:
    """Insert or replace one meta key; `mark` is the dialect's placeholder."""
    return (f"INSERT INTO meta (key, value) VALUES ({mark}, {mark}) "
            f"ON CONFLICT (key) DO UPDATE SET value = excluded.value")


# One encoder for every row: json.dumps with options builds a new JSONEncoder per call.
_metadata_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


def write_values(item: Item, content_hash: str | bytes, *, with_vector: bool,
                 print_: int | None = None, text: str | bytes | None = None) -> tuple[Any, ...]:
    """The WRITE_COLUMNS values of an item (metadata as JSON text); `print_` is its text's
    word print when already computed (print_worker.py); `text` the value the dialect stores
    for its text (SQLite's textcodec.pack), when not the text itself; `content_hash` as the
    dialect stores it (SQLite: its 16 bytes, tables.hash_blob)."""
    return (
        item.id, item.corpus, item.title, item.text if text is None else text, item.kind,
        item.scope, item.repo, item.namespace, item.source_url,
        "{}" if item.metadata == {} else _metadata_json(item.metadata),
        item.created_at, item.updated_at, item.expires_at, item.access_count,
        item.last_accessed_at, bool(item.stale), content_hash, content_hash if with_vector else None,
        word_print(item.text) if print_ is None else print_,
    )


def given_prints(prints: Sequence[int] | None, n: int) -> Sequence[int | None]:
    """Each of `n` items' word print as a write was given it (None: write_values computes it)."""
    return [None] * n if prints is None else prints


def row_to_item(row: Sequence[Any]) -> StoredItem:
    """An ITEM_COLUMNS or READ_COLUMNS row as an item; metadata arrives as JSON text or
    already decoded, the text as it is or packed (SQLite's textcodec)."""
    metadata = row[9]
    if not metadata or metadata == "{}":  # most items: nothing to parse
        metadata = {}
    elif isinstance(metadata, str | bytes):
        metadata = json.loads(metadata)
    # Positional (the order is checked below): a search builds a few dozen of these, and
    # seventeen keywords cost 2.5x the call.
    return StoredItem(
        unpack(row[3]), row[0], row[1], row[2], row[4], row[5], row[6], row[7], row[8], metadata,
        row[10], row[11], row[12], row[13], row[14], bool(row[15]),
        row[16] if len(row) > 16 else None,
    )


# row_to_item passes the text (column 3) first, then the other READ_COLUMNS in their order:
# that must be StoredItem's field order.
if (READ_COLUMNS[3] != "text" or tuple(f.name for f in fields(StoredItem))
        != ("text", *(c for c in READ_COLUMNS if c != "text"))):  # pragma: no cover
    raise ImportError("READ_COLUMNS or StoredItem's fields moved: update records.row_to_item")


def in_order(ids: Sequence[str], found: Mapping[str, StoredItem]) -> list[StoredItem]:
    """The found items in the order asked, missing ones skipped."""
    return [found[i] for i in ids if i in found]


# -- filters -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterDialect:
    """The SQL fragments a dialect writes filters with; values are always bound.

    `mark` is the placeholder; `one_of(column, values)` is "column equals one of values"
    with its bound values; `is_false(column)` tests a boolean column; `metadata_in(alias,
    key, values)` is "metadata[key] equals one of values" with its bound values;
    `path_matches(alias, patterns)` is "metadata.path matches one of the path patterns"
    (pathglob.py: one regex for them all, which both dialects run). `text_match(alias,
    match)` is the query's word conditions (`+word`, `-word`, `title:`) where the
    dialect's SQL can test words (PostgreSQL's tsvector); without it the dialect applies
    them through its text index itself (SQLite's tantivy).
    """

    mark: str
    one_of: Callable[[str, Sequence[Any]], tuple[str, list[Any]]]
    is_false: Callable[[str], str]
    metadata_in: Callable[[str, str, Sequence[Any]], tuple[str, list[Any]]]
    path_matches: Callable[[str, Sequence[str]], tuple[str, list[Any]]]
    text_match: Callable[[str, TextMatch], tuple[str, list[Any]]] | None = None


def filter_conditions(
    area: SearchArea, dialect: FilterDialect, alias: str = "i", *, corpus: bool = True,
) -> tuple[list[str], list[Any]]:
    """Conditions (to be joined by AND) on `items <alias>` and their bound values."""
    f = area.filters
    mark = dialect.mark
    clauses: list[str] = []
    params: list[Any] = []

    def add(clause: str, values: Sequence[Any]) -> None:
        clauses.append(clause)
        params.extend(values)

    if corpus and area.corpora is not None:
        if len(area.corpora) == 1:
            add(f"{alias}.corpus = {mark}", area.corpora)
        else:
            add(*dialect.one_of(f"{alias}.corpus", area.corpora))
    if not f.include_expired:
        add(f"({alias}.expires_at IS NULL OR {alias}.expires_at > {mark})", [area.now])
    if not f.include_stale:
        add(dialect.is_false(f"{alias}.stale"), [])
    for column, values in (("kind", f.kinds), ("scope", f.scope), ("repo", f.repo),
                           ("namespace", f.namespace)):
        if values:
            add(*dialect.one_of(f"{alias}.{column}", values))
    for key, values in f.metadata:
        add(*dialect.metadata_in(alias, key, values))
    if f.paths:
        add(*dialect.path_matches(alias, f.paths))
    if f.languages:
        add(*dialect.metadata_in(alias, "language", f.languages))
    if area.match and dialect.text_match is not None:
        add(*dialect.text_match(alias, area.match))
    for column, op, value in (("created_at", ">=", f.created_after),
                              ("created_at", "<", f.created_before),
                              ("updated_at", ">=", f.updated_after),
                              ("updated_at", "<", f.updated_before)):
        if value is not None:
            add(f"{alias}.{column} {op} {mark}", [value])
    return clauses, params


def value_counts_sql(key: str, json_value: str, corpora: str) -> str:
    """The query behind Backend.value_counts: `json_value` is the dialect's text of metadata's
    key (one bound value), `corpora` its "corpus is one of" (the corpora bound after it)."""
    if key != "kind" and not key.isidentifier():
        raise InvalidFilterError(f"no counts of values for the key {key!r:.60}")
    value = "kind" if key == "kind" else json_value
    return f"SELECT {value}, count(*) FROM items WHERE {corpora} GROUP BY 1"


# -- integrity rules ---------------------------------------------------------------------------


def vector_checks(vectors: str, has_vector: str | None = None) -> tuple[tuple[str, str], ...]:
    """(problem, count query) pairs: items and the vector table `vectors` agree by rowid.

    `has_vector` is the dialect's fastest test that item `i` has a vector (default: a
    correlated EXISTS; a virtual table may prefer `i.rowid IN (SELECT rowid ...)`).
    """
    has_vector = has_vector or f"EXISTS (SELECT 1 FROM {vectors} v WHERE v.rowid = i.rowid)"
    return (
        ("vectors without an item",
         f"SELECT count(*) FROM {vectors} v "
         f"WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.rowid = v.rowid)"),
        ("items marked embedded without a vector",
         f"SELECT count(*) FROM items i WHERE i.embedded_hash IS NOT NULL AND NOT {has_vector}"),
        ("vectors of items not marked embedded",
         f"SELECT count(*) FROM items i WHERE i.embedded_hash IS NULL AND {has_vector}"),
    )


# -- vector storage and the re-embed state machine ---------------------------------------------


class VectorTables(Protocol):
    """What a dialect does, inside one write transaction, for the steps below."""

    def meta(self, keys: Sequence[str]) -> dict[str, str]: ...
    def set_meta(self, pairs: Sequence[tuple[str, str]]) -> None: ...
    def delete_meta(self, keys: Sequence[str]) -> None: ...
    def create_vector_table(self, dim: int) -> None: ...
    def replace_vector_table(self, dim: int) -> None: ...
    def has_pending_table(self) -> bool: ...
    def create_pending_table(self, dim: int) -> None: ...
    def drop_pending_table(self) -> None: ...
    # Into the (new, empty) vector table: each pending vector whose item still has the
    # content hash it was computed from; items' embedded_hash set to match. Returns how many.
    def move_pending_vectors(self) -> int: ...


def ensure_vector_table(tx: VectorTables, dim: int) -> bool:
    """Create the vector table for `dim` unless it exists; True when it was created."""
    current = tx.meta([META_VECTOR_DIM]).get(META_VECTOR_DIM)
    if current is not None and int(current) == dim:
        return False
    if current is not None:
        raise DimensionMismatchError(f"store holds {current}-dimensional vectors, not {dim}")
    tx.create_vector_table(dim)
    tx.set_meta([(META_VECTOR_DIM, str(dim))])
    return True


def _pending(model_id: str, dim: int) -> dict[str, str]:
    return {META_PENDING_EMBEDDER: model_id, META_PENDING_VECTOR_DIM: str(int(dim))}


def begin_reembed(tx: VectorTables, model_id: str, dim: int) -> None:
    """Start filling pending vectors for `model_id`; the same model and dimension resume."""
    wanted = _pending(model_id, dim)
    if tx.meta(PENDING_KEYS) == wanted and tx.has_pending_table():
        return
    tx.drop_pending_table()
    tx.create_pending_table(dim)
    tx.set_meta(list(wanted.items()))


def pending_dim(recorded: str | None) -> int:
    """The dimension pending vectors must have, from META_PENDING_VECTOR_DIM's value
    (StoreError when no re-embedding is in progress)."""
    if recorded is None:
        raise StoreError("no re-embedding is in progress")
    return int(recorded)


def finish_reembed(tx: VectorTables, model_id: str, dim: int) -> int:
    """Swap the pending vectors in and record the new model; returns how many moved.

    Items whose text changed since their pending vector was computed (or that arrived
    meanwhile) are left without a vector, for `ids_missing_vectors`.
    """
    if tx.meta(PENDING_KEYS) != _pending(model_id, dim):
        raise StoreError(f"no re-embedding to {model_id!r} is in progress")
    tx.replace_vector_table(dim)
    moved = tx.move_pending_vectors()
    tx.drop_pending_table()
    tx.delete_meta(PENDING_KEYS)
    tx.set_meta([(META_EMBEDDER, model_id), (META_VECTOR_DIM, str(int(dim)))])
    return moved


def cancel_reembed(tx: VectorTables) -> None:
    """Forget an unfinished re-embedding and its pending vectors."""
    tx.drop_pending_table()
    tx.delete_meta(PENDING_KEYS)


# -- what to do about each integrity problem ------------------------------------------------------

_REPAIR = "run `hybridkb check --repair`"
_ADVICE: tuple[tuple[str, str], ...] = (
    ("sqlite:", "the file itself is damaged: " + _REPAIR + " to rebuild the indexes, the full-text "
     "index and the vectors; if this problem stays, the items' own pages are damaged: restore a backup, or "
     "`hybridkb export` what still reads and import it into a new store"),
    ("fts", _REPAIR + ": the full-text index is rebuilt from the items"),
    ("statistics say", _REPAIR + ": the BM25 statistics are recomputed from the items"),
    ("vectors without an item", _REPAIR + ": the orphaned vectors are dropped"),
    ("items marked embedded without a vector",
     _REPAIR + ": those items are embedded again (or `hybridkb reembed`)"),
    ("vectors of items not marked embedded",
     _REPAIR + ": the stale vectors are dropped and the items embedded again"),
    ("cannot be written", "let the process write to the index folder (permissions, a read-only "
     "mount) or free space on its disk: the indexes catch up by themselves"),
    ("disk is full", "free space on the index folder's disk: the indexes catch up by themselves"),
    ("index folder is not a folder", _REPAIR + ": the file is moved aside and the indexes rebuilt"),
    ("vector index", _REPAIR + ": the vector index is rebuilt"),
    ("text index", _REPAIR + ": the text index is rebuilt from the items"),
)


def advice(problem: str) -> str:
    """What a user should do about one entry of `integrity_problems`."""
    lowered = problem.lower()
    for marker, fix in _ADVICE:
        if marker.lower() in lowered:
            return fix
    return _REPAIR + "; if the problem stays, export the store and import it into a new one"
