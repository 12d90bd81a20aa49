"""The `index` and `embed` commands: text committed first, vectors behind it, progress in work units.

Registered on the `hybridkb` group by cli.py; kept apart so the folder workflow
(dry runs, roots, interrupts, watching) does not crowd the other commands.
"""

from __future__ import annotations

import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import click

from .cli_common import emit, handle_errors, pass_ctx
from .cli_options import Context
from .cli_progress import ctrl_c_stops, on_worker, progress_bar
from .errors import EmbeddingInterrupted
from .store import KnowledgeBase
from .validation import is_postgres_target


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "-"


EMBED_BATCH = 16  # vectors per transaction here: the bar moves, and Ctrl-C keeps, every 16 chunks


def embed_pending(kb: KnowledgeBase, *, batch_size: int = EMBED_BATCH, quiet: bool = False) -> dict[str, Any]:
    """Embed the queue in this process with a progress line. Ctrl-C stops within a second
    (the model's run under way is ended, its batch dropped), keeps every committed batch
    and says how many chunks still wait."""
    total = kb.awaiting_embedding()
    started = time.monotonic()
    done = 0
    model = kb.embedder
    if total and model is not None:
        def count(n: int) -> None:
            nonlocal done
            done += n
            bar.update(n)

        with ctrl_c_stops(model.interrupt, "stopping: the batch in hand is dropped") as stop, \
                progress_bar(total, "embedding", "chunk") as bar:
            with suppress(EmbeddingInterrupted):  # what committed before stays; the count says
                on_worker(lambda: kb.embed_pending(batch_size=batch_size, progress=count, stop=stop))
            stopped = stop()
        model.resume()
        if stopped:
            left = kb.awaiting_embedding()
            click.echo(f"stopped: embedded {done} of {total} chunks; "
                       + (f"{left} wait in the store (`hybridkb embed` continues)" if left
                          else "none waits"), err=True)
            sys.exit(130)
    seconds = time.monotonic() - started
    left = kb.awaiting_embedding()
    if total and not quiet:
        click.echo(f"embedded {done} chunks in {seconds:.1f}s ({_rate(done, seconds)})"
                   + (f"; {left} still waiting" if left else ""), err=True)
    return {"embedded": done, "embed_seconds": round(seconds, 3), "awaiting_embedding": left}


@click.command(name="embed")
@click.option("--batch-size", default=EMBED_BATCH, show_default=True, help="Items per transaction.")
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
        with ctrl_c_stops(message="stopping after the file in hand") as stop:
            return index_folder(kb, path, corpus, stop=stop,
                                progress=lambda total, desc: progress_bar(total, desc, "file"), **options)
    except CorpusRootError as exc:
        interactive = sys.stdin.isatty() and sys.stderr.isatty() and not ctx.as_json
        if not interactive or not click.confirm(
                f"corpus {corpus!r} mirrors {exc.old} ({exc.items} items). Replace it with {exc.new}?",
                err=True):
            raise
        return index_folder(kb, path, corpus, progress=lambda total, desc: progress_bar(total, desc, "file"),
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
                "codes": f"one-bit codes, recall@10 {report['codes_recall']} "
                         + (f"scanning {report['codes_scanned']} rows of the nearest cells and "
                            if report.get("codes_scanned") else "")
                         + f"rescoring {report['codes_rescore']} rows",
            }.get(report["first_pass"], "exact scan")
            if report["graph"] and report["first_pass"] != "graph":
                shape += f" (the graph measured recall@10 {report['graph_recall']})"
            if report["first_pass"] in ("graph", "codes"):
                shape += f", measured {on}"
            done = "built now" if report["vector_base_built"] else "already current"
            click.echo(f"vector index: {report['vectors']} vectors, {shape}, {done}")
        if report.get("reclaimed_bytes"):
            click.echo(f"file: {report['reclaimed_bytes'] / 1e6:.1f} MB of free pages returned")
        click.echo(f"done in {report['seconds']:.1f}s")

    emit(ctx, report, human)


def register(group: click.Group) -> None:
    """Add `index`, `embed` and `optimize` to the `hybridkb` group."""
    group.add_command(index_)
    group.add_command(embed)
    group.add_command(optimize)
