"""python -m benchmarks [--sizes 10000,100000] [--queries 300] [--out benchmarks/results/]

Builds a store per size, measures FTS / vector / hybrid latency, ingest, size and
memory beside bm25s and an exact numpy baseline, writes JSON and markdown to
--out, and (unless --quick or --no-doc) the `## Speed` section of docs/benchmarks.md.
Its stores keep no sample of the queries asked (`sample_queries=False`, storage/asked.py):
recall is measured with the benchmark's queries, so no index may have been measured on
them, and a store's one-time measurement on them would land in the timings.
"""

from __future__ import annotations

import os
import sys

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads(argv: list[str]) -> str:
    """--blas-threads N, read before numpy loads (it sizes its thread pool once)."""
    for i, arg in enumerate(argv):
        if arg == "--blas-threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--blas-threads="):
            return arg.split("=", 1)[1]
    return "1"


if "numpy" not in sys.modules and _blas_threads(sys.argv[1:]) != "0":
    for _var in BLAS_VARS:
        os.environ[_var] = _blas_threads(sys.argv[1:])

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from . import report  # noqa: E402
from .data import DEFAULT_DATASETS  # noqa: E402
from .run import ROOT, Options, run  # noqa: E402


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"sizes are integers separated by commas: {text!r}") from exc
    if not sizes or any(s < 20 for s in sizes):
        raise argparse.ArgumentTypeError("each size must be at least 20 items")
    return sizes


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=_sizes, default=None,
                   help="store sizes in items, comma-separated (default 10000,100000)")
    p.add_argument("--queries", type=int, default=None, help="queries timed per mode (default 300)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up queries (default 20)")
    p.add_argument("--embed-items", type=int, default=None,
                   help="items ingested with the real model per size (default 500)")
    p.add_argument("--embedder", default="minilm",
                   help="minilm (default) or hashing-DIM (fast, for smoke runs)")
    p.add_argument("--data", type=Path, action="append", default=None,
                   help="a BEIR dataset folder (repeatable; default SciFact and NFCorpus)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                   help="folder for the JSON and markdown results")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md",
                   help="the doc whose `## Speed` section gets the table")
    p.add_argument("--no-doc", action="store_true", help="leave the doc alone")
    p.add_argument("--large", action="store_true",
                   help="add a 1,000,000-item store (hours on a shared 2-core machine)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2000 items, 50 queries, 50 embedded items; no doc update")
    p.add_argument("--no-cache", action="store_true", help="do not read or write cached vectors")
    p.add_argument("--keep-stores", action="store_true", help="keep the built .db files")
    p.add_argument("--no-vec0", action="store_true", help="skip sqlite-vec's own KNN")
    p.add_argument("--no-profile", action="store_true", help="skip the stage breakdown")
    p.add_argument("--no-serve", action="store_true",
                   help="skip the fresh serving process (cold query, peak RSS)")
    p.add_argument("--blas-threads", default="1",
                   help="BLAS threads for numpy (both hybridkb's matrix and the baseline); "
                        "default 1: on a shared 2-core machine a threaded matrix-vector "
                        "product waits on busy cores; 0 keeps the library default")
    p.add_argument("--no-peers", action="store_true",
                   help="skip LanceDB and Chroma (measured when installed: pip install 'hybridkb[bench]')")
    p.add_argument("--peers", default="lancedb,chroma",
                   help="which installed peers to measure, comma-separated (default lancedb,chroma)")
    p.add_argument("--no-whatif", action="store_true",
                   help="skip re-measuring hybrid with a faster dedup and an in-memory BM25")
    return p


def options_from(args: argparse.Namespace) -> Options:
    quick = args.quick
    queries = args.queries if args.queries is not None else 50 if quick else 300
    if queries < 1:
        raise SystemExit("--queries must be at least 1")
    return Options(
        sizes=(args.sizes or ([2_000] if quick else [10_000, 100_000])) + ([1_000_000] if args.large else []),
        queries=queries,
        warmup=args.warmup if args.warmup is not None else 5 if quick else 20,
        embed_items=args.embed_items if args.embed_items is not None else 50 if quick else 500,
        embedder=args.embedder,
        datasets=tuple(args.data) if args.data else DEFAULT_DATASETS,
        cache=not args.no_cache,
        workdir=args.out / "stores",
        keep_stores=args.keep_stores,
        vec0=not args.no_vec0,
        profile=not args.no_profile,
        serve=not args.no_serve,
        whatif=not args.no_whatif,
        peers=() if args.no_peers else tuple(p.strip() for p in args.peers.split(",") if p.strip()),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = options_from(args)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = run(options, log)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path, md_path = report.write(results, args.out, stamp)
    print(report.markdown(results))
    log(f"\nwrote {json_path} and {md_path}")
    if not (args.quick or args.no_doc):
        report.update_doc(args.doc, results)
        log(f"updated the Speed section of {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
