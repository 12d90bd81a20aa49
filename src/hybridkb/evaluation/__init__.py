"""Retrieval evaluation on BEIR-layout datasets: loading, metrics, the eval runner.

    from hybridkb.evaluation import EvalOptions, evaluate
    report = evaluate("data/scifact", hybridkb.MiniLMEmbedder())
    print(format_table(report))
"""

from __future__ import annotations

from .beir import Dataset, Document, Query, load
from .cache import EmbeddingCache, default_cache_dir
from .metrics import evaluate as score_run
from .runner import EvalOptions, EvalReport, RowResult, RunSpec, evaluate, format_table, plan_runs

__all__ = [
    "Dataset", "Document", "EmbeddingCache", "EvalOptions", "EvalReport", "Query", "RowResult",
    "RunSpec", "default_cache_dir", "evaluate", "format_table", "load", "plan_runs", "score_run",
]
