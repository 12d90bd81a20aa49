"""`hybridkb import`, `export` and `migrate`: items in and out of a store as JSON Lines, or
store to store. Registered on the `hybridkb` group by cli.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from . import cli_index
from . import open as open_kb
from .cli_common import emit, handle_errors, pass_ctx, progress_bar
from .cli_options import Context, require_store


@click.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--corpus", help="Put every item in this corpus (overrides the file's).")
@click.option("--batch-size", default=256, show_default=True)
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines and items instead of stopping.")
@pass_ctx
@handle_errors
def import_(ctx: Context, file: Path, corpus: str | None, batch_size: int, skip_bad: bool) -> None:
    """Import items from a JSONL file: an `export`, or one item per line (BEIR's `_id` works).

    Replaces items with the same id. Every line is checked first and a bad one stops
    the import before anything is written, unless --skip-bad. Vectors in an export
    are kept when it comes from the model this store uses.
    """
    from . import transfer

    kb = ctx.kb()
    kb.embed_mode = "defer"  # text first; the vectors follow below, with their own progress line
    with progress_bar(_lines(file), "importing") as bar:
        report = transfer.import_file(kb, file, batch_size=batch_size, skip_bad=skip_bad,
                                      corpus=corpus, progress=bar.update)
    embedded = cli_index.embed_pending(kb, quiet=ctx.as_json) if kb.awaiting_embedding() else {}
    for message in report.skipped[:20]:
        click.echo(f"skipped: {message}", err=True)
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    total, skipped = report.imported, len(report.skipped)
    emit(ctx, {"imported": total, "skipped": skipped, **embedded},
         lambda: click.echo(f"imported {total} items" + (f", skipped {skipped}" if skipped else "")))


@click.command(name="export")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--vectors", is_flag=True,
              help="Include each item's vector; an import into a store of the same model then "
                   "skips embedding.")
@click.option("--corpus", "corpora", multiple=True, help="Only this corpus (repeatable).")
@pass_ctx
@handle_errors
def export_(ctx: Context, file: Path | None, vectors: bool, corpora: tuple[str, ...]) -> None:
    """Write every item as JSON Lines to FILE (.gz compresses) or stdout.

    Every field is kept: metadata, timestamps (epoch seconds), access counts, expiry,
    stale flags; vectors with --vectors. `hybridkb import FILE` reads it back.
    """
    import gzip
    import tempfile

    from . import transfer

    require_store(ctx.db)
    ctx.embedder = None  # reading needs no model
    kb = ctx.kb()
    if file is None or str(file) == "-":
        with progress_bar(kb.count(), "exporting") as bar:
            n = transfer.write_export(kb, sys.stdout, vectors=vectors, corpora=corpora or None,
                                      progress=bar.update)
        sys.stdout.flush()
        click.echo(json.dumps({"exported": n}) if ctx.as_json else f"exported {n} items", err=True)
        return
    # written beside the target and renamed at the end: an interrupted export leaves no
    # truncated file that looks complete
    fd, tmp_name = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.resolve().parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        opener: Any = gzip.open if file.suffix == ".gz" else open
        with opener(tmp, "wt", encoding="utf-8") as out, progress_bar(kb.count(), "exporting") as bar:
            n = transfer.write_export(kb, out, vectors=vectors, corpora=corpora or None,
                                      progress=bar.update)
        tmp.replace(file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    emit(ctx, {"exported": n, "file": str(file)}, lambda: click.echo(f"exported {n} items to {file}"))


@click.command()
@click.option("--to", "target", required=True, metavar="TARGET",
              help="The new, empty store: a postgresql:// URL (or a SQLite file path).")
@click.option("--batch-size", default=256, show_default=True)
@click.option("--no-vectors", is_flag=True,
              help="Embed the text again in the target instead of copying the vectors.")
@pass_ctx
@handle_errors
def migrate(ctx: Context, target: str, batch_size: int, no_vectors: bool) -> None:
    """Copy this store (--db) into an empty new one, e.g. from SQLite to PostgreSQL.

    Items keep every field; vectors are copied (nothing is re-embedded) when both
    stores use --embedder's model. The source is left unchanged.
    """
    from . import transfer

    require_store(ctx.db)
    source = ctx.kb()
    dest = open_kb(target, embedder=ctx.embedder)
    try:
        with progress_bar(source.count(), "migrating") as bar:
            report = transfer.migrate(source, dest, vectors=not no_vectors, batch_size=batch_size,
                                      progress=bar.update)
        count = dest.count()
    finally:
        dest.close()
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    emit(ctx, {"migrated": report.imported, "target": dest.target, "target_items": count,
               "notes": report.notes},
         lambda: click.echo(f"migrated {report.imported} items to {dest.target}"))


def _lines(file: Path) -> int | None:
    """The file's non-blank lines, about its records (a rate needs no total, an ETA does);
    None when it cannot be read (the import says why)."""
    import gzip

    opener: Any = gzip.open if file.suffix == ".gz" else open
    try:
        with opener(file, "rb") as handle:
            return sum(1 for line in handle if line.strip()) or None
    except (OSError, EOFError):
        return None


def register(group: click.Group) -> None:
    """Add `import`, `export` and `migrate` to the `hybridkb` group."""
    group.add_command(import_)
    group.add_command(export_)
    group.add_command(migrate)
