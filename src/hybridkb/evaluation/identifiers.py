"""The identifier evaluation: do exact names find their code, and does noise score low?

Source trees of installed packages (by default two of hybridkb's own dependencies, so
every install has them; the report names their versions) are indexed with
`index_folder`, one corpus each, into one fresh store. The queries are the function and
class names the code defines (found with `ast`, dunder names left out) that occur, as
whole identifiers, in 2 to 40 chunks; a chunk containing the name is relevant (grade 1),
a chunk holding its definition more so (grade 2). Each row reports nDCG@10, Recall@100,
MRR@10 and the share of the first min(10, n) hits that contain the name (n: the chunks
that contain it).

Beside it, the score targets of docs/scoring.md: the share of these queries whose first
hit (kb.search defaults) scores at least calibration.HIGH, and the share of nonsense and
off-topic queries over the same store whose first hit scores below calibration.LOW.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import calibration
from ..embedding import Embedder, Vectors
from ..errors import InvalidInputError
from ..ingest import index_folder
from ..store import KnowledgeBase
from . import runner
from .beir import Query
from .cache import EmbeddingCache, PrecomputedQueries, ProgressFactory, cached_embed, no_progress
from .calibrate import nonsense
from .runner import EvalOptions, RowResult

PACKAGES = ("click", "tqdm")  # core dependencies: present wherever hybridkb is installed
MIN_CHUNKS, MAX_CHUNKS = 2, 40
# Questions no source tree answers (none of them is one of noise.PROBES).
OFF_TOPIC = (
    "recipe for chocolate chip cookies", "how tall is mount everest", "who painted the mona lisa",
    "best time to visit japan", "symptoms of the common cold", "how to train a puppy to sit",
    "history of the roman empire", "what is the capital of australia", "how do bees make honey",
    "marathon training plan for beginners", "price of a used bicycle", "meaning of a rainbow dream",
    "lyrics of a famous love song", "how to grow tomatoes on a balcony", "rules of chess castling",
    "wedding speech ideas for the best man", "why is the sky blue", "how to fix a flat tyre",
    "vegetarian lasagna with spinach", "distance from the earth to the moon",
    "tips for a job interview", "origami crane folding steps", "how to brew green tea",
    "the life cycle of a butterfly", "what do pandas eat", "how to clean a cast iron pan",
    "skiing holidays in the alps", "birthday party games for children",
    "how many bones are in the human body", "the tallest waterfall in the world",
)


@dataclass(slots=True)
class IdentifierRow:
    row: RowResult
    contains_share: float  # mean share of the first min(10, n) hits containing the name


@dataclass(slots=True)
class IdentifierReport:
    packages: dict[str, str]  # name -> version
    chunks: int
    queries: int
    embedder: str | None
    rows: list[IdentifierRow] = field(default_factory=list)
    exact_high: float | None = None  # share of identifier queries: first hit >= HIGH
    noise_low: float | None = None  # share of nonsense / off-topic queries: first hit < LOW
    noise_queries: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "evaluation": "identifiers", "packages": self.packages, "chunks": self.chunks,
            "queries": self.queries, "embedder": self.embedder,
            "results": [{**r.row.to_dict(), "top10_contains": round(r.contains_share, 6)}
                        for r in self.rows],
            "exact_first_hit_at_least": calibration.HIGH, "exact_share": self.exact_high,
            "noise_first_hit_below": calibration.LOW, "noise_share": self.noise_low,
            "noise_queries": self.noise_queries,
        }


class _CodeVectors(Embedder):
    """The model, with document vectors read from (and written to) the eval cache: the
    index run embeds the same chunks in the same batches each time."""

    def __init__(self, model: Embedder, cache: EmbeddingCache | None, tag: str) -> None:
        self.model, self.cache, self.tag = model, cache, tag
        self.name, self.dim, self.version = model.name, model.dim, model.version

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return self.embed_documents(texts)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        ids = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest()[:16] for t in texts]
        return cached_embed(self.model, kind="code", source_sha=self.tag, ids=ids, texts=list(texts),
                            cache=self.cache).vectors

    def embed_query(self, text: str) -> Vectors:
        return self.model.embed_query(text)


def package_folder(name: str) -> tuple[Path, str]:
    """An installed package's source folder and version."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise InvalidInputError(f"package {name!r} is not installed")
    return Path(spec.origin).parent, importlib.metadata.version(name)


def definitions(folder: Path) -> dict[str, list[tuple[str, int]]]:
    """Function and class name -> [(path relative to `folder`, line)] of its definitions."""
    found: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(folder.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        rel = path.relative_to(folder).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not (
                    node.name.startswith("__") and node.name.endswith("__")):
                found.setdefault(node.name, []).append((rel, node.lineno))
    return found


def _mentions(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")


def judgments(chunks: Sequence[Any], defs: dict[str, list[tuple[str, str, int]]]
              ) -> dict[str, dict[str, int]]:
    """Name -> {chunk id: 2 for a chunk holding a definition, 1 for one containing the
    name}, for names found in MIN_CHUNKS to MAX_CHUNKS chunks. `defs` names (corpus,
    path, line) of each definition."""
    out: dict[str, dict[str, int]] = {}
    for name in sorted(defs):
        pattern = _mentions(name)
        judged = {c.id: 1 for c in chunks if pattern.search(c.text)}
        if not MIN_CHUNKS <= len(judged) <= MAX_CHUNKS:
            continue
        for c in chunks:
            meta = c.metadata
            for corpus, rel, line in defs[name]:
                if (c.id in judged and c.corpus == corpus and meta.get("path") == rel
                        and meta.get("start_line", 0) <= line <= meta.get("end_line", 0)):
                    judged[c.id] = 2
        out[name] = judged
    return out


def index_packages(kb: KnowledgeBase, folders: dict[str, tuple[Path, str]],
                   progress: ProgressFactory = no_progress,
                   ) -> tuple[list[Any], dict[str, list[tuple[str, str, int]]]]:
    """Index each package's source (a copy) into corpus code-NAME: (the chunks, each name's
    definitions as (corpus, path, line))."""
    defs: dict[str, list[tuple[str, str, int]]] = {}
    for name, (folder, _) in folders.items():
        corpus = f"code-{name}"
        if kb.count(corpus):
            raise InvalidInputError(
                f"the store already holds corpus {corpus!r}; evaluate into a fresh store")
        with tempfile.TemporaryDirectory(prefix="hybridkb-code-") as copy:
            # A copy of the sources: inside a virtualenv they would be skipped, and ignore
            # files above the package would apply.
            tree = Path(copy) / name
            shutil.copytree(folder, tree, ignore=shutil.ignore_patterns("__pycache__"))
            index_folder(kb, tree, corpus, progress=progress)
        for ident, places in definitions(folder).items():
            defs.setdefault(ident, []).extend((corpus, rel, line) for rel, line in places)
    return list(kb.iter_items()), defs


def code_vectors(model: Embedder, cache: EmbeddingCache | None,
                 folders: dict[str, tuple[Path, str]]) -> Embedder:
    """The model with the chunks' vectors cached under the packages' names and versions."""
    tag = hashlib.sha256(repr(sorted((n, v) for n, (_, v) in folders.items())).encode()).hexdigest()
    return _CodeVectors(model, cache, tag)


def evaluate_identifiers(
    embedder: Embedder | None, options: EvalOptions | None = None, *,
    packages: Sequence[str] = PACKAGES, cache: EmbeddingCache | None = None,
    progress: ProgressFactory = no_progress,
) -> IdentifierReport:
    """Index the packages into one fresh store and run every planned row over their names."""
    o = options or EvalOptions()
    specs = runner.plan_runs(o)
    runner.check(specs, embedder, o)
    folders = {name: package_folder(name) for name in packages}
    tag = hashlib.sha256(repr(sorted((n, v) for n, (_, v) in folders.items())).encode()).hexdigest()
    model = _CodeVectors(embedder, cache, tag) if embedder is not None else None
    report = IdentifierReport(packages={n: v for n, (_, v) in folders.items()}, chunks=0, queries=0,
                              embedder=embedder.model_id if embedder else None)
    with runner._target(o.db) as target:
        with runner._open(target, model, None) as kb:
            chunks, defs = index_packages(kb, folders, progress)
        qrels = judgments(chunks, defs)
        texts = {c.id: c.text for c in chunks}
        queries = [Query(id=name, text=name) for name in qrels]
        report.chunks, report.queries = len(chunks), len(queries)
        noise_texts = [*nonsense(30, seed=11), *OFF_TOPIC]
        searcher: Embedder | None = model
        if embedder is not None and model is not None:
            asked = [q.text for q in queries] + noise_texts
            got = cached_embed(embedder, kind="queries", source_sha=tag, ids=asked, texts=asked,
                               cache=cache, progress=progress)
            searcher = PrecomputedQueries(model, dict(zip(asked, got.vectors, strict=True)))
        with runner._open(target, searcher, None) as kb:
            for spec in specs:
                row = runner._run_row(kb, spec, queries, qrels, [None] * len(queries), None,
                                      replace(o, keep_runs=True))
                report.rows.append(IdentifierRow(row, _contains(row.run or {}, texts, qrels)))
                if not o.keep_runs:
                    row.run = None
            if any(s.default for s in specs):
                report.exact_high = _share(kb, [q.text for q in queries], lambda s: s >= calibration.HIGH)
                report.noise_low = _share(kb, noise_texts, lambda s: s < calibration.LOW)
                report.noise_queries = len(noise_texts)
    return report


def _contains(run: dict[str, list[str]], texts: dict[str, str], qrels: dict[str, dict[str, int]]
              ) -> float:
    """The mean share of the first min(10, n) hits that contain the name, n the chunks that
    contain it (R-precision cut at 10): 1.0 when every chunk with the name comes first."""
    shares = []
    for name, ranked in run.items():
        n = min(10, len(qrels[name]))
        pattern = _mentions(name)
        shares.append(sum(bool(pattern.search(texts.get(d, ""))) for d in ranked[:n]) / n)
    return float(np.mean(shares)) if shares else 0.0


def _share(kb: KnowledgeBase, texts: Sequence[str], keep: Any) -> float:
    firsts = [r.hits[0].score if (r := kb.search(t, limit=1)).hits else 0.0 for t in texts]
    return sum(bool(keep(s)) for s in firsts) / len(firsts) if firsts else 0.0


def format_identifiers(report: IdentifierReport) -> str:
    pkgs = ", ".join(f"{n} {v}" for n, v in report.packages.items())
    lines = [f"identifiers: {report.queries} names defined in {pkgs} ({report.chunks} chunks)"]
    cols = ("mode", "fusion", "nDCG@10", "R@100", "MRR@10", "top10 contains", "p50 ms")
    rows = [(r.row.spec.mode + ("*" if r.row.spec.default else ""),
             (r.row.spec.fusion or "-") if r.row.spec.mode == "hybrid" else "-",
             f"{r.row.scores['ndcg@10']:.4f}", f"{r.row.scores['recall@100']:.4f}",
             f"{r.row.scores['mrr@10']:.4f}", f"{r.contains_share:.4f}", f"{r.row.p50_ms:.1f}")
            for r in report.rows]
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    if report.exact_high is not None:
        lines.append(f"first hit scoring >= {calibration.HIGH}: {report.exact_high:.1%} of the "
                     f"identifier queries; below {calibration.LOW}: {report.noise_low:.1%} of "
                     f"{report.noise_queries} nonsense and off-topic queries")
    return "\n".join(lines)
