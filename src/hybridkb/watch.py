"""`hybridkb index DIR --watch`: keep a corpus in step with its folder as files change.

watchfiles reports creations, edits, renames and deletions (debounced); each batch
runs the same incremental sync as `index` (unchanged files cost a hash), so text is
committed and searchable within a second and the walk's rules (.gitignore, skips)
hold. Vectors follow in a background thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path

import click

from .background import BackgroundEmbedder
from .errors import BackendUnavailableError
from .ingest import Skipped, index_folder
from .store import KnowledgeBase


def watch_folder(
    kb: KnowledgeBase, path: Path, corpus: str, *, include: Iterable[str] = (),
    exclude: Iterable[str] = (), debounce_ms: int = 200, embed: bool = True, as_json: bool = False,
    stop: threading.Event | None = None, already_skipped: Iterable[Skipped] = (),
) -> None:
    """Sync `corpus` with `path` on every change until Ctrl-C (or `stop` is set); a line per change."""
    try:
        from watchfiles import watch
    except ImportError as exc:  # an optional extra
        raise BackendUnavailableError("--watch needs watchfiles: pip install 'hybridkb[watch]'") from exc
    include, exclude = tuple(include), tuple(exclude)
    said = {(s.path, s.reason) for s in already_skipped}  # skips already reported
    root = path.resolve()
    folder = root if root.is_dir() else root.parent
    embedder = BackgroundEmbedder(kb, idle=0.5).start() if embed else None
    click.echo(f"watching {root} (Ctrl-C to stop)", err=True)
    try:
        for _changes in watch(folder, debounce=debounce_ms, step=50, stop_event=stop,
                              rust_timeout=1000, yield_on_timeout=False, raise_interrupt=False):
            summary = index_folder(kb, root, corpus, include=include, exclude=exclude)
            said = _say_skips(summary.skipped, said, as_json)
            for change in summary.changes:
                if as_json:
                    click.echo(json.dumps({"path": change.path, "action": change.action,
                                           "added": change.added, "updated": change.updated,
                                           "removed": change.removed}), nl=True)
                else:
                    click.echo(change.line())
            if embedder is not None and summary.changes:
                embedder.wake()
    except KeyboardInterrupt:  # Ctrl-C between watchfiles' checks: a sync commits its finished files
        pass
    finally:
        click.echo("stopped watching", err=True)
        if embedder is not None:
            embedder.stop()


def _say_skips(skipped: Iterable[Skipped], said: set[tuple[str, str]],
               as_json: bool) -> set[tuple[str, str]]:
    """Report each file skipped that was not skipped (for this reason) last time, as one-shot
    `index` does; returns what is skipped now."""
    now = {(s.path, s.reason) for s in skipped}
    for path, reason in sorted(now - said):
        if as_json:
            click.echo(json.dumps({"path": path, "action": "skipped", "reason": reason}))
        else:
            click.echo(f"skipped: {path}: {reason}", err=True)
    return now
