"""The storage contract: what KnowledgeBase and the pipeline may ask of a store.

A dialect (sqlite/, postgres/) implements `Backend`; nothing above this layer knows SQL,
and nothing here knows fusion. This is the whole list: every method is called by
store.py or pipeline.py (`integrity_problems` and `repair` by `KnowledgeBase.check`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from ..model import Filters, Item, Key, StoredItem
from ..querysyntax import TextMatch
from ..textquery import TextQuery
from .codec import Vector

__all__ = ["Backend", "Key", "ScoredKeys", "SearchArea", "Vector"]

# A retrieval names each item by a key (model.Key): the dialect's cheapest handle on it
# (the rowid, which both dialects' indexes hold). A search compares keys only
# with keys of the same search and reads the items behind them once, with `items_by_key`:
# ids are read for the few dozen items a search shows or weighs, not for every entry of
# 300-deep lists.
ScoredKeys = list[tuple[Key, float]]


@dataclass(frozen=True, slots=True)
class SearchArea:
    """Where one retrieval looks: which corpora (None: every corpus), the filters, the
    clock that decides expiry, and the words a hit must or must not hold (`+word`,
    `-word`, `title:`; querysyntax.py). Applied inside each query, never after it."""

    corpora: tuple[str, ...] | None
    filters: Filters
    now: float
    match: TextMatch | None = None

    def __post_init__(self) -> None:
        if self.corpora is not None and not self.corpora:
            raise ValueError("SearchArea.corpora is None (every corpus) or names at least one")


class Backend(Protocol):
    """A store's system of record: items, their vectors, and a few meta keys.

    Transactions: every method that writes is one transaction; items, full-text rows and
    vectors change together or not at all, and a failed write changes nothing. Reads see
    committed data only. Safe to call from several threads. Errors are HybridKBError
    subclasses (StoreError, InvalidInputError, DimensionMismatchError,
    BackendUnavailableError), never a driver's exception.

    Retrievals return `(key, score)` best first, ties by storage order; scores are
    higher-is-better (BM25 as a positive number, cosine similarity, substring hit count).
    """

    url: str  # where the store lives, without a password (for messages and stats)
    bm25_weights: tuple[float, float]  # full-text column weights (title, text)
    # Set when the store holds a migration this version does not know (a newer hybridkb
    # made it): every write then raises StoreError with this text; reads still work.
    newer_schema: str | None

    # -- meta ---------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        """The value of a meta key (records.META_*), None when unset."""
    def set_meta(self, key: str, value: str, *, wait: bool = True) -> None:
        """Set a meta key (insert or replace); `wait=False`: a StoreError at once rather than
        wait for another writer (what a search writes in passing)."""
    def keep_query_vectors(self, rows: Sequence[tuple[int, int, bytes]], now: float, *,
                           measure: bool = True) -> None:
        """Keep asked queries' vectors (asked.py: digest, dim, bytes); with `measure`, the
        vector index is measured on them once there are enough. May raise StoreError."""

    # -- vector storage -------------------------------------------------------------------------
    def vector_dim(self) -> int | None:
        """The dimension of stored vectors; None until the vector table exists."""
    def ensure_vector_storage(self, dim: int) -> None:
        """Create the vector table for `dim` if there is none (safe when several stores
        race to do it); DimensionMismatchError when it exists with another dimension."""

    # -- writes -----------------------------------------------------------------------------------
    def upsert(
        self, items: Sequence[Item], vectors: Sequence[Vector | None], content_hashes: Sequence[str],
        *, replace: bool, prints: Sequence[int] | None = None, within: Sequence[str] | None = None,
    ) -> None:
        """Write items (ids set) with their vectors and content hashes, in one transaction;
        `prints`: their texts' word prints when already computed (dedup.word_print).
        `within`: an existing item is replaced only when its corpus is one of these, in the
        write's own statement (a server limited to some corpora); else NotFoundError and
        nothing is written.

        `replace=False`: an existing id is InvalidInputError and nothing is written.
        `replace=True`: an existing item takes the new fields but keeps created_at,
        access_count and last_accessed_at, and keeps its vector when its content hash is
        unchanged and no new vector is given (records.ON_CONFLICT_REPLACE). A vector of
        the wrong size is DimensionMismatchError.
        """
    def bulk_writes(self) -> AbstractContextManager[None]:
        """Entered around the batches of one `add_many`: a dialect may keep derived indexes
        current as it goes (SQLite feeds its text index) or do nothing."""
    def write_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> int:
        """Vectors (and `embedded_hash`) only, for items whose content hash still matches;
        item rows are not rewritten. One transaction. Returns how many items got their vector."""
    def delete(self, ids: Sequence[str], *, within: Sequence[str] | None = None) -> int:
        """Delete items with their full-text rows and vectors; returns how many existed
        (`within`: only those whose corpus is one of these, decided in the delete itself)."""
    def touch(self, ids: Sequence[str], now: float) -> None:
        """access_count += 1 and last_accessed_at = now, for the ids that exist."""
    def purge_expired(self, now: float) -> int:
        """Delete every item with expires_at <= now; returns how many."""

    # -- reads --------------------------------------------------------------------------------------
    def get(self, ids: Sequence[str], *, include_expired: bool, now: float) -> list[StoredItem]:
        """The items that exist, in the order asked (missing ids skipped)."""
    def items_by_key(self, keys: Sequence[Key]) -> dict[Key, StoredItem]:
        """The items behind a retrieval's keys (expired ones included); a key whose item is
        gone is left out."""
    def embedded_hashes(self, ids: Sequence[str]) -> dict[str, str]:
        """id -> the content hash its current vector was computed from (ids with one)."""
    def count(self, corpus: str | None = None) -> int:
        """Items in `corpus`, or in the store (expired and stale ones included)."""
    def corpora(self) -> dict[str, int]:
        """Corpus name -> number of items, for every corpus holding any, by name."""
    def value_counts(self, key: str, corpora: Sequence[str]) -> dict[str, int]:
        """Value -> items in `corpora` holding it, for `key` "kind" (the column) or a metadata
        key of word characters ("language"); items without one are left out."""
    def iter_items(self, batch_size: int = 500) -> Iterator[list[StoredItem]]:
        """Every item in storage order, batch by batch (each batch one read)."""
    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        """id -> stored vector, for the ids that have one."""
    def ids_missing_vectors(self, limit: int, corpora: Sequence[str] | None = None) -> list[str]:
        """Up to `limit` ids, in storage order, without a vector of their current text (only
        in `corpora` when given)."""

    # -- switching embedding models (KnowledgeBase.reembed) -------------------------------------
    # The new vectors are written beside the old ones, keyed by item id with the content hash
    # they were computed from, and swapped in by one transaction at the end; until then the
    # store keeps its old model and vectors. The state machine is records.begin_reembed /
    # finish_reembed / cancel_reembed: resumable (`begin_reembed` with the same model and
    # dimension keeps what is pending; another model starts over); the model being switched
    # to is kept in META_PENDING_EMBEDDER / META_PENDING_VECTOR_DIM; `finish_reembed` sets
    # META_EMBEDDER and META_VECTOR_DIM and removes those.
    def begin_reembed(self, model_id: str, dim: int) -> None:
        """Start, or resume for the same model and dimension, a switch to `model_id`."""
    def pending_missing_ids(self, after: str, limit: int) -> list[str]:
        """Ids > `after`, in id order, without a pending vector for their current text."""
    def write_pending_vectors(
        self, ids: Sequence[str], vectors: Sequence[Vector], content_hashes: Sequence[str],
    ) -> None:
        """Store pending vectors (StoreError when no switch is in progress)."""
    def finish_reembed(self, model_id: str, dim: int) -> int:
        """In one transaction: pending vectors replace the old ones and the store records
        the new model. Returns how many vectors were swapped in."""
    def cancel_reembed(self) -> None:
        """Forget an unfinished switch and its pending vectors."""

    # -- retrieval (filters applied inside each query) ------------------------------------------
    def text_search(self, query: TextQuery, area: SearchArea, limit: int) -> ScoredKeys:
        """Full-text (BM25) matches of `query`; [] for a query with no terms."""
    def vector_search(self, vector: Vector, area: SearchArea, limit: int) -> ScoredKeys:
        """Cosine nearest neighbours; [] before any vector exists or for a non-finite query;
        DimensionMismatchError for a query of the wrong size."""
    def substring_search(self, words: Sequence[str], area: SearchArea, limit: int) -> ScoredKeys:
        """Items whose text or title contains the words, by how many (word, field) hits:
        the last resort when nothing else matched."""

    # -- maintenance ------------------------------------------------------------------------------
    def integrity_problems(self) -> list[str]:
        """Empty when sound: the database's own checks, and items / full-text rows / vectors
        agreeing (records.vector_checks). Each entry says what is wrong."""
    def repair(self) -> list[str]:
        """Rebuild, in one transaction, whatever derives from the items and disagrees with
        them (full-text index, statistics, vector bookkeeping, indexes); returns what was
        done. Items whose vector was dropped are left for `reembed` to embed again."""
    def close(self) -> None:
        """Release connections; the object is unusable afterwards."""
