"""The `index` and `embed` commands: text committed first, vectors behind it, progress in work units.

Registered on the `hybridkb` group by cli.py; kept apart so the folder workflow
(dry runs, roots, interrupts, watching) does not crowd the other commands.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from .cli_common import emit, handle_errors, pass_ctx
from .cli_options import Context
from .store import KnowledgeBase
from .validation import is_postgres_target


@contextmanager
def ctrl_c_stops() -> Iterator[Callable[[], bool]]:
    """Ctrl-C asks the work to stop at its next file or batch (a second one stops at once).

    A KeyboardInterrupt raised inside a database call would be reported as a failed write
    (SQLite turns an exception in a Python function it calls into an error); a flag asked
    between units of work keeps the interrupt clean.
    """
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return

    def handler(signum: int, frame: object) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def work_bar(total: int | None, desc: str, unit: str) -> Iterator[Any]:
    """A progress line on stderr with rate and ETA (tqdm), shown on a terminal or HYBRIDKB_PROGRESS=1."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, smoothing=0.1,
              disable=not sys.stderr.isatty() and os.environ.get("HYBRIDKB_PROGRESS") != "1") as bar:
        yield bar


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "-"


def embed_pending(kb: KnowledgeBase, *, batch_size: int = 256, quiet: bool = False) -> dict[str, Any]:
    """Embed the queue in this process with a progress line; Ctrl-C keeps what is done."""
    total = kb.awaiting_embedding()
    started = time.monotonic()
    done = 0
    if total:
        def count(n: int) -> None:
            nonlocal done
            done += n
            bar.update(n)

        try:
            with ctrl_c_stops() as stop, work_bar(total, "embedding", "chunk") as bar:
                kb.embed_pending(batch_size=batch_size, progress=count, stop=stop)
                if stop():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            click.echo(f"embedding interrupted after {done} of {total}; the rest waits in the store "
                       f"(`hybridkb embed` continues)", err=True)
            sys.exit(130)
    seconds = time.monotonic() - started
    left = kb.awaiting_embedding()
    if total and not quiet:
        click.echo(f"embedded {done} chunks in {seconds:.1f}s ({_rate(done, seconds)})"
                   + (f"; {left} still waiting" if left else ""), err=True)
    return {"embedded": done, "embed_seconds": round(seconds, 3), "awaiting_embedding": left}


@click.command(name="embed")
@click.option("--batch-size", default=256, show_default=True, help="Items per transaction.")
@pass_ctx
@handle_errors
def embed(ctx: Context, batch_size: int) -> None:
    """Embed the items waiting for a vector (written by index, import or serve in deferred mode).

    Each batch is committed: an interrupted run keeps its work, the next continues.
    """
    kb = ctx.kb()
    if kb.embedder is None:
        raise click.UsageError("embedding needs a model: drop --no-embedder / --embedder none")
    data = embed_pending(kb, batch_size=batch_size, quiet=True)
    emit(ctx, data, lambda: click.echo(
        f"embedded {data['embedded']} items in {data['embed_seconds']:.1f}s"
        + (f"; {data['awaiting_embedding']} still waiting" if data["awaiting_embedding"] else "")))


def _print_summary(summary: Any, dry_run: bool) -> None:
    for skipped in summary.skipped:
        click.echo(f"skipped: {skipped.path}: {skipped.reason}", err=True)
    for warning in summary.warnings:
        click.echo(f"warning: {warning}", err=True)
    if dry_run:
        for change in summary.changes:
            click.echo(change.line(dry_run=True))
    click.echo(summary.line())


def _run_index(ctx: Context, kb: KnowledgeBase, path: Path, corpus: str, options: dict[str, Any]) -> Any:
    from .ingest import CorpusRootError, IndexInterrupted, index_folder

    try:
        with ctrl_c_stops() as stop:
            return index_folder(kb, path, corpus, stop=stop,
                                progress=lambda total, desc: work_bar(total, desc, "file"), **options)
    except CorpusRootError as exc:
        interactive = sys.stdin.isatty() and sys.stderr.isatty() and not ctx.as_json
        if not interactive or not click.confirm(
                f"corpus {corpus!r} mirrors {exc.old} ({exc.items} items). Replace it with {exc.new}?",
                err=True):
            raise
        return index_folder(kb, path, corpus, progress=lambda total, desc: work_bar(total, desc, "file"),
                            **{**options, "replace": True})
    except IndexInterrupted as stop:
        summary = stop.summary
        click.echo(f"interrupted: {len(summary.changes)} files committed; run the same command "
                   f"again to continue", err=True)
        emit(ctx, summary.to_dict(), lambda: click.echo(summary.line()))
        sys.exit(130)


@click.command(name="index")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--corpus", required=True, help="The corpus that mirrors PATH (chunks of gone files "
              "are removed from it).")
@click.option("--include", "includes", multiple=True, metavar="GLOB",
              help="Only files matching this gitignore-style glob (repeatable); any extension "
                   "(unknown ones as text), never skipped as data or generated.")
@click.option("--exclude", "excludes", multiple=True, metavar="GLOB",
              help="Skip files and folders matching this gitignore-style glob (repeatable).")
@click.option("--dry-run", is_flag=True, help="Print what would be added, changed and removed; "
              "write nothing.")
@click.option("--replace", is_flag=True, help="Let PATH replace the folder the corpus mirrors.")
@click.option("--base-url", help="Link chunks to BASE_URL/path#Lstart-Lend (e.g. a repository "
              "browser's blob URL); remembered by the corpus.")
@click.option("--no-embed", is_flag=True, help="Commit the text only; embed later (`hybridkb embed`).")
@click.option("--watch", is_flag=True, help="Keep indexing changes until Ctrl-C (needs watchfiles).")
@click.option("--debounce", default=200, show_default=True, help="Watch: milliseconds to gather changes.")
@pass_ctx
@handle_errors
def index_(ctx: Context, path: Path, corpus: str, includes: tuple[str, ...], excludes: tuple[str, ...],
           dry_run: bool, replace: bool, base_url: str | None, no_embed: bool, watch: bool,
           debounce: int) -> None:
    """Index a folder (or one file) of Markdown, text, HTML, notebooks and source files.

    The text is committed file by file and is searchable at once; the vectors follow
    (with their own progress line). A re-run touches only what changed; Ctrl-C keeps
    finished files. Respects .gitignore; skips binary, data, generated and vendored files.
    """
    if dry_run:  # nothing is written, embedded or created: a missing store reads as an empty one
        ctx.embedder = None
        ctx.write_nothing()
        if not is_postgres_target(ctx.db) and not Path(ctx.db).expanduser().exists():
            ctx.db = ":memory:"
    kb = ctx.kb()
    kb.embed_mode = "defer"
    options: dict[str, Any] = {"include": includes, "exclude": excludes, "dry_run": dry_run,
                               "replace": replace, "base_url": base_url}
    summary = _run_index(ctx, kb, path, corpus, options)
    data: dict[str, Any] = summary.to_dict()
    chunks = summary.chunks_added + summary.chunks_updated
    data["text_seconds"] = round(summary.seconds, 3)
    if not ctx.as_json:
        _print_summary(summary, dry_run)
        if chunks and not dry_run:
            took = summary.seconds
            click.echo(f"text committed in {took:.1f}s ({_rate(summary.files_scanned, took)} files, "
                       f"{_rate(chunks, took)} chunks); searchable by text now", err=True)
    if not dry_run and not no_embed and kb.embedder is not None:
        data.update(embed_pending(kb, quiet=ctx.as_json))
    else:
        data["awaiting_embedding"] = kb.awaiting_embedding()
    if ctx.as_json:
        emit(ctx, data, lambda: None)
    if watch and not dry_run:
        from .watch import watch_folder

        watch_folder(kb, path, corpus, include=includes, exclude=excludes, debounce_ms=debounce,
                     embed=not no_embed and kb.embedder is not None, as_json=ctx.as_json,
                     already_skipped=summary.skipped)


@click.command(name="optimize")
@pass_ctx
@handle_errors
def optimize(ctx: Context) -> None:
    """Build the derived indexes to completion now, with progress.

    Searches keep the indexes current on their own (a graph for a large vector base is
    built in the background); a short-lived process exits before that build ends, so its
    searches scan vectors exactly. Run this after a bulk load to get the graph at once.
    """
    ctx.embedder = None  # the indexes are built from stored vectors: no model needed
    start = time.monotonic()
    report = ctx.kb().optimize()
    report["seconds"] = round(time.monotonic() - start, 3)

    asked = report.get("measured_on_asked")
    on = f"on {asked} asked queries" if asked else "on pseudo-queries"

    def human() -> None:
        if "bm25_merged" in report:  # PostgreSQL
            shape = (f"IVFFlat, {report.get('lists')} lists, {report.get('probes')} probes "
                     f"(recall@10 {report.get('probe_recall')} {on})"
                     if report["first_pass"] == "ivfflat" else "exact scan")
            done = "built now" if report.get("vector_index_built") else "already current"
            click.echo("BM25 index: blocks merged")
            if report["vectors"]:
                click.echo(f"vector index: {report['vectors']} vectors, {shape}, {done}")
            click.echo(f"done in {report['seconds']:.1f}s")
            return
        if "text_documents" not in report:
            click.echo("nothing to optimize: this store keeps no derived indexes")
            return
        click.echo(f"text index: {report['text_documents']} documents, up to change {report['text_seq']}")
        if "vectors" in report:
            shape = {
                "graph": f"HNSW graph, recall@10 {report['graph_recall']} at ef {report['graph_ef']}",
                "codes": f"one-bit codes, recall@10 {report['codes_recall']} rescoring "
                         f"{report['codes_rescore']} rows",
            }.get(report["first_pass"], "exact scan")
            if report["graph"] and report["first_pass"] != "graph":
                shape += f" (the graph measured recall@10 {report['graph_recall']})"
            if report["first_pass"] in ("graph", "codes"):
                shape += f", measured {on}"
            done = "built now" if report["vector_base_built"] else "already current"
            click.echo(f"vector index: {report['vectors']} vectors, {shape}, {done}")
        click.echo(f"done in {report['seconds']:.1f}s")

    emit(ctx, report, human)


def register(group: click.Group) -> None:
    """Add `index`, `embed` and `optimize` to the `hybridkb` group."""
    group.add_command(index_)
    group.add_command(embed)
    group.add_command(optimize)
