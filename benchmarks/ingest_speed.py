"""python -m benchmarks.ingest_speed [--tree src --tree docs] [--embedder minilm] [--no-doc]

Indexes a real source tree with `hybridkb index` in a fresh process, as a user
would, and reports: files/s and chunks/s of the text commit, time to the first
searchable result (the first committed chunk a full-text query finds, from the
process start), time until fully embedded, and the embedding rate through the
store beside the model alone on the same texts (one `embed_documents` call, the
best the model can do). Writes JSON to --out and the `## Indexing` section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- indexing:begin (written by python -m benchmarks.ingest_speed) -->"
END = "<!-- indexing:end -->"
HEADING = "## Indexing a source tree"


def _searchable(db: Path) -> bool:
    if not Path(f"{db}-wal").exists():  # not before WAL mode: a reader then could fail the writer
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            # A committed item is found by the next search (it reads the change log's delta
            # until the text index has taken it in); items_fts went with migration 004.
            return conn.execute("SELECT 1 FROM items LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False


def index_run(tree: Path, embedder: str, workdir: Path) -> dict[str, Any]:
    """One `hybridkb index` process on a copy of `tree`: its JSON summary plus the wall-clock marks."""
    db = workdir / "kb.db"
    env = {**os.environ, "HYBRIDKB_PROGRESS": "0", "PYTHONPATH": str(ROOT / "src")}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hybridkb.cli import main; main()", "--db", str(db), "--embedder",
         embedder, "--json", "index", str(tree), "--corpus", "tree"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = None
    while proc.poll() is None:
        if first is None and _searchable(db):
            first = time.perf_counter() - started
        time.sleep(0.005)
    out, err = proc.communicate()
    total = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"hybridkb index failed: {err}")
    summary = json.loads(out)
    return {"summary": summary, "first_searchable_s": first if first is not None else total,
            "fully_embedded_s": total}


def model_alone(tree_db: Path, embedder: str) -> dict[str, Any]:
    """The model on the indexed chunks' texts, in one call (length-sorted by the model itself)."""
    import hybridkb
    from hybridkb.embedding import get_embedder

    model = get_embedder(embedder)
    assert model is not None
    kb = hybridkb.open(tree_db, embedder=None)
    try:
        texts = [item.embedding_text for item in kb.iter_items()]
    finally:
        kb.close()
    model.embed_documents(texts[:32])  # load the model outside the clock
    started = time.perf_counter()
    model.embed_documents(texts)
    seconds = time.perf_counter() - started
    return {"texts": len(texts), "seconds": seconds, "per_s": len(texts) / seconds}


def store_vs_model(tree_db: Path, embedder: str, n: int, rounds: int = 2) -> dict[str, Any]:
    """In one process, alternately: the model alone on `n` chunk texts, and `kb.embed_pending()`
    on the same chunks written with embed="defer" into a fresh store. Best round of each."""
    import hybridkb
    from hybridkb.embedding import get_embedder

    model = get_embedder(embedder)
    assert model is not None
    source = hybridkb.open(tree_db, embedder=None)
    try:
        items = [{"id": it.id, "title": it.title, "text": it.text} for it in source.iter_items()][:n]
    finally:
        source.close()
    texts = [f"{it['title']} {it['text']}" if it["title"] else it["text"] for it in items]
    model.embed_documents(texts[:16])  # load outside the clock
    alone, through = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        model.embed_documents(texts)
        alone.append(time.perf_counter() - started)
        with tempfile.TemporaryDirectory(prefix="hkb-embed-bench-") as tmp:
            kb = hybridkb.open(Path(tmp) / "kb.db", embedder=model, embed="defer")
            kb.add_many(items)
            started = time.perf_counter()
            done = kb.embed_pending()
            through.append(time.perf_counter() - started)
            kb.close()
            assert done == len(items)
    return {"chunks": len(items), "model_alone_per_s": len(items) / min(alone),
            "store_per_s": len(items) / min(through), "rounds": rounds}


def measure(trees: list[Path], embedder: str, compare: int = 0) -> dict[str, Any]:
    rows = []
    for tree in trees:
        with tempfile.TemporaryDirectory(prefix="hkb-ingest-bench-") as tmp:
            work = Path(tmp)
            copy = work / tree.name
            shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            run = index_run(copy, embedder, work)
            alone = model_alone(work / "kb.db", embedder)
            paired = store_vs_model(work / "kb.db", embedder, compare) if compare else None
        s = run["summary"]
        chunks = s["chunks_added"] + s["chunks_updated"]
        rows.append({
            "tree": str(tree.relative_to(ROOT) if tree.is_relative_to(ROOT) else tree),
            "files": s["files_scanned"], "chunks": chunks, "skipped": len(s["skipped"]),
            "text_s": s["text_seconds"], "files_per_s": s["files_scanned"] / s["text_seconds"],
            "chunks_per_s": chunks / s["text_seconds"],
            "first_searchable_s": run["first_searchable_s"], "fully_embedded_s": run["fully_embedded_s"],
            "embed_s": s.get("embed_seconds", 0.0),
            "store_embed_per_s": s.get("embedded", 0) / s["embed_seconds"] if s.get("embed_seconds") else 0.0,
            "model_alone_per_s": alone["per_s"], "paired": paired,
        })
    return {"embedder": embedder, "cores": os.cpu_count(), "rows": rows,
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"`python -m benchmarks.ingest_speed` ({result['embedder']}, {result['cores']} cores shared with "
        f"other work, {result['when']}): `hybridkb index` in a fresh process; time to first searchable "
        "counts from the process start (interpreter and imports included).",
        "",
        "| tree | files | chunks | text commit | files/s | chunks/s | first searchable | fully embedded "
        "| embedding through the store | model alone | store / model |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        ratio = r["store_embed_per_s"] / r["model_alone_per_s"] if r["model_alone_per_s"] else 0.0
        lines.append(
            f"| {r['tree']} | {r['files']} | {r['chunks']} | {r['text_s']:.2f} s | {r['files_per_s']:.0f} "
            f"| {r['chunks_per_s']:.0f} | {r['first_searchable_s']:.2f} s | {r['fully_embedded_s']:.1f} s "
            f"| {r['store_embed_per_s']:.1f} chunks/s | {r['model_alone_per_s']:.1f} chunks/s "
            f"| {ratio:.2f} |")
    paired = [r for r in result["rows"] if r.get("paired")]
    if paired:
        lines += ["", "Embedding through the store against the model alone, in one process, alternating, "
                  "best of the rounds (same chunks; `kb.embed_pending()` reads them from a store written "
                  "with `embed=\"defer\"` and commits the vectors):", "",
                  "| tree | chunks | model alone | `kb.embed_pending()` | store / model |",
                  "|---|---:|---:|---:|---:|"]
        for r in paired:
            p = r["paired"]
            share = p["store_per_s"] / p["model_alone_per_s"]
            lines.append(f"| {r['tree']} | {p['chunks']} | {p['model_alone_per_s']:.1f} chunks/s "
                         f"| {p['store_per_s']:.1f} chunks/s | {share:.2f} |")
    return "\n".join(lines)


def update_doc(doc: Path, table: str) -> None:
    text = doc.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{table}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
    doc.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ingest_speed",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--tree", type=Path, action="append", help="a folder to index (repeatable; "
                   "default this repository's src/ and docs/)")
    p.add_argument("--embedder", default="minilm", help="minilm (default) or hashing-DIM")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--no-doc", action="store_true")
    p.add_argument("--compare", type=int, default=300, help="chunks for the paired in-process "
                   "comparison of the store's embedding against the model alone (0: skip)")
    args = p.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [ROOT / "src", ROOT / "docs"])]
    result = measure(trees, args.embedder, args.compare)
    table = markdown(result)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ingest-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {path}", file=sys.stderr)
    if not args.no_doc:
        update_doc(args.doc, table)
        print(f"updated {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
