"""What every `hybridkb` command shares: the context, error mapping, JSON output, progress bars."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from . import open as open_kb
from .errors import HybridKBError
from .store import KnowledgeBase

F = TypeVar("F", bound=Callable[..., Any])


class Context:
    def __init__(self, db: str, embedder: str | None, as_json: bool) -> None:
        self.db, self.embedder, self.as_json = db, embedder, as_json
        self._kb: KnowledgeBase | None = None
        self._closers: list[Callable[[], Any]] = []

    def kb(self) -> KnowledgeBase:
        if self._kb is None:
            self._kb = open_kb(self.db, embedder=self.embedder)
        return self._kb

    def on_close(self, callback: Callable[[], Any]) -> None:
        """Run `callback` before the store closes (e.g. stop a background thread)."""
        self._closers.append(callback)

    def close(self) -> None:
        for callback in reversed(self._closers):
            callback()
        if self._kb is not None:
            self._kb.close()


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def handle_errors(func: F) -> F:
    """Map library and OS errors to one clear line and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HybridKBError as exc:
            _fail(str(exc))
        except (OSError, UnicodeDecodeError) as exc:
            _fail(str(exc))

    return wrapper  # type: ignore[return-value]


def emit(ctx: Context, data: Any, human: Callable[[], None]) -> None:
    if ctx.as_json:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))
    else:
        human()


def progress_bar(total: int | None, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="item", file=sys.stderr,
                disable=not sys.stderr.isatty() and os.environ.get("HYBRIDKB_PROGRESS") != "1")


pass_ctx = click.make_pass_decorator(Context)
