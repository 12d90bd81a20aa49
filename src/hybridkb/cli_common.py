"""What every `hybridkb` command shares: error mapping, JSON output, progress bars, the context.

Kept apart from cli.py so command modules (cli_index) import it without a cycle.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from .cli_options import FLAGS, Context
from .cli_progress import progress_bar as progress_bar  # every command's feedback
from .errors import HybridKBError

F = TypeVar("F", bound=Callable[..., Any])


def json_mode(args: Sequence[str] = ()) -> bool:
    """Whether this command prints JSON: --json seen by the parser (or in `args`, for an error
    the parser raised before it got that far)."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    flagged = root is not None and (bool(root.meta.get(FLAGS, {}).get("as_json"))
                                    or getattr(root.command, "json_args", False))
    return flagged or "--json" in args


def fail_with(message: str, kind: str = "error", *, as_json: bool | None = None, code: int = 1) -> None:
    """One line on stderr (`error: ...`), or under --json one object on stdout
    ({"error": message, "type": kind}); then exit with `code`."""
    if as_json if as_json is not None else json_mode():
        click.echo(json.dumps({"error": message, "type": kind}, ensure_ascii=False))
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _fail(message: str, *, code: int = 1) -> None:
    fail_with(message, code=code)


def handle_errors(func: F) -> F:
    """Map library and OS errors to one clear line (or JSON object) and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = json_mode() or bool(kwargs.get("as_json"))  # eval has a --json of its own
        try:
            return func(*args, **kwargs)
        except HybridKBError as exc:
            fail_with(str(exc), type(exc).__name__, as_json=as_json)
        except (OSError, UnicodeDecodeError) as exc:
            fail_with(str(exc), type(exc).__name__, as_json=as_json)
        except KeyboardInterrupt:  # a job without a stopping point of its own: what committed stays
            fail_with("interrupted (Ctrl-C); what was committed before stays", "KeyboardInterrupt",
                      as_json=as_json, code=130)

    return wrapper  # type: ignore[return-value]


class JsonErrorsGroup(click.Group):
    """click's own errors (a bad option, a missing argument, `--help` aside) as one JSON
    object on stdout under --json, like every other error."""

    def main(self, args: Sequence[str] | None = None, *rest: Any, **options: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        self.json_args = "--json" in argv  # seen before the parser gets to a later --json
        if not json_mode(argv):
            return super().main(argv, *rest, **options)
        try:
            return super().main(argv, *rest, **{**options, "standalone_mode": False})
        except click.ClickException as exc:
            fail_with(exc.format_message(), type(exc).__name__, as_json=True, code=exc.exit_code)
        except click.exceptions.Abort:
            fail_with("aborted", "Abort", as_json=True)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        return None


def emit(ctx: Context, data: Any, human: Callable[[], None]) -> None:
    if ctx.as_json:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))
    else:
        human()


pass_ctx = click.make_pass_decorator(Context)
