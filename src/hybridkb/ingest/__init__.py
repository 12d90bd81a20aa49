"""Index a folder of Markdown, text and source files into a corpus (`hybridkb index`)."""

from __future__ import annotations

from .chunk import Chunk, chunk_markdown, chunk_text
from .code import chunk_code
from .indexer import IndexSummary, chunk_file, chunk_ids, index_folder
from .walk import Skipped, SourceFile, find_files

__all__ = [
    "Chunk", "IndexSummary", "Skipped", "SourceFile", "chunk_code", "chunk_file", "chunk_ids",
    "chunk_markdown", "chunk_text", "find_files", "index_folder",
]
