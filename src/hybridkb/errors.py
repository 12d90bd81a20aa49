"""One exception hierarchy: every error the library raises on purpose is a HybridKBError."""

from __future__ import annotations


class HybridKBError(Exception):
    """Base class of every error hybridkb raises deliberately."""


class NotFoundError(HybridKBError, KeyError):
    """An item, corpus or store that was asked for does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class InvalidInputError(HybridKBError, ValueError):
    """An argument is malformed: bad filter, bad id, empty text, bad option."""


class InvalidFilterError(InvalidInputError):
    """A search filter names an unknown field or has a value of the wrong shape."""


class DimensionMismatchError(InvalidInputError):
    """A vector's dimension differs from the store's embedding dimension."""


class EmbedderMismatchError(HybridKBError):
    """The store was built with another embedding model; vector search is refused."""


class BackendUnavailableError(HybridKBError):
    """The backend cannot be used: missing optional dependency, unreachable server, no extension."""


class StoreError(HybridKBError):
    """The database refused or failed an operation (locked too long, corrupt, disk full)."""


class EmbeddingInterrupted(HybridKBError):
    """Embedding was asked to stop (`Embedder.interrupt()`, the CLI's Ctrl-C): the batch in
    hand was dropped, never written; what was written before it stays."""
