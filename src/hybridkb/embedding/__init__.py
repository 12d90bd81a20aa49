"""Embedders: the protocol, the default offline model, a deterministic test model."""

from __future__ import annotations

from ..errors import InvalidInputError
from .base import Embedder, Vectors, content_hash, normalize_rows
from .hashing import HashingEmbedder
from .minilm import MiniLMEmbedder
from .onnx_embedder import OnnxEmbedder

DEFAULT = "minilm"
# The names an embedder may be given, said alike by the CLI's help and the error for a
# name it does not know.
CHOICES = ("default (all-MiniLM-L6-v2, bundled), onnx:PATH (your own model's folder), "
           "hashing-DIM (a deterministic test model) or none")

__all__ = [
    "CHOICES", "DEFAULT", "Embedder", "HashingEmbedder", "MiniLMEmbedder", "OnnxEmbedder", "Vectors",
    "content_hash", "get_embedder", "normalize_rows",
]


def get_embedder(spec: Embedder | str | None) -> Embedder | None:
    """Resolve "minilm" / "default", "onnx:PATH", "hashing[-DIM]", "none" / None, or an instance."""
    if spec is None or isinstance(spec, Embedder):
        return spec
    if not isinstance(spec, str):
        raise InvalidInputError(f"embedder must be a name or an Embedder, not {type(spec).__name__}")
    if spec.strip()[:5].lower() == "onnx:":  # the path keeps its case
        return OnnxEmbedder(spec.strip()[5:])
    name = spec.strip().lower()
    if name in ("none", "", "off"):
        return None
    if name in ("minilm", "default", MiniLMEmbedder.name.lower(), "all-minilm-l6-v2"):
        return MiniLMEmbedder()
    if name.startswith("hashing"):
        _, _, dim = name.partition("-")
        if not dim:
            return HashingEmbedder(64)
        if dim.isascii() and dim.isdigit():
            return HashingEmbedder(int(dim))  # checks the range
    raise InvalidInputError(f"unknown embedder {spec!r}; use {CHOICES}")
