"""What every `hybridkb` command shares: error mapping, JSON output, progress bars, the context.

Kept apart from cli.py so command modules (cli_index) import it without a cycle.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .cli_options import Context
from .errors import HybridKBError

F = TypeVar("F", bound=Callable[..., Any])


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
