"""Index a folder of Markdown, text and source files into a corpus (`hybridkb index`)."""

from __future__ import annotations

from .chunk import Chunk, chunk_markdown, chunk_text
from .code import chunk_code
from .indexer import (
    CorpusRootError,
    FileChange,
    IndexInterrupted,
    IndexSummary,
    chunk_file,
    chunk_ids,
    corpus_root,
    index_folder,
)
from .walk import Skipped, SourceFile, find_files

__all__ = [
    "Chunk", "CorpusRootError", "FileChange", "IndexInterrupted", "IndexSummary", "Skipped",
    "SourceFile", "chunk_code", "chunk_file", "chunk_ids", "chunk_markdown", "chunk_text",
    "corpus_root", "find_files", "index_folder",
]
