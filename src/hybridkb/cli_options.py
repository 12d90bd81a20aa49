"""The CLI's global options and the context every command runs in.

`--db`, `--embedder`, `--rerank`, `--no-embedder`, `--json`, `--replica` and `--read-your-writes` are
accepted before or after the command (`hybridkb --json search x` = `hybridkb search x
--json`): the group
and every command carry them, and their values land in one place (`ctx.meta`),
the later one winning. Each setting then comes from the first of: the flag, the
environment (HYBRIDKB_DB, HYBRIDKB_EMBEDDER), the config file, the default.
Commands that only read never create a store where there is none.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from . import embedding
from . import open as open_kb
from .config import Config, load_config
from .errors import InvalidInputError, NotFoundError
from .store import KnowledgeBase
from .validation import is_postgres_target

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DB = "hybridkb.db"
DEFAULT_EMBEDDER = "default"
FLAGS = "hybridkb.flags"
# Commands that read (or change) an existing store: on a missing SQLite file they fail instead
# of creating an empty one.
NEEDS_STORE = frozenset({"search", "get", "stats", "export", "migrate", "delete", "purge", "reembed",
                         "check", "optimize"})


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and value is not False and value != ():
        assert param.name is not None
        ctx.meta.setdefault(FLAGS, {})[param.name] = value
    return value


def _global_options() -> list[click.Option]:
    return [
        click.Option(["--db"], default=None, expose_value=False, callback=_remember, metavar="STORE",
                     help=f"Store: a SQLite file path or a postgresql:// URL (env HYBRIDKB_DB; "
                          f"default {DEFAULT_DB}).", is_eager=False),
        click.Option(["--embedder"], default=None, expose_value=False, callback=_remember,
                     metavar="NAME", help=f"Embedding model: {embedding.CHOICES} (env HYBRIDKB_EMBEDDER)."),
        click.Option(["--rerank"], default=None, expose_value=False, callback=_remember, metavar="onnx:PATH",
                     help="A cross-encoder's folder: reorder each search's first 30 hits by it "
                          "(env HYBRIDKB_RERANK; docs/models.md)."),
        click.Option(["--no-embedder"], is_flag=True, default=False, expose_value=False,
                     callback=_remember, help="Full-text only: no vectors, no model load."),
        click.Option(["--json", "as_json"], is_flag=True, default=False, expose_value=False,
                     callback=_remember, help="Print one JSON object instead of a table."),
        click.Option(["--replica", "replicas"], multiple=True, expose_value=False, callback=_remember,
                     metavar="URL", help="A PostgreSQL streaming replica that answers searches "
                                         "(repeatable; env HYBRIDKB_REPLICAS, space-separated); "
                                         "writes go to --db."),
        click.Option(["--read-your-writes"], is_flag=True, default=False, expose_value=False,
                     callback=_remember, help="With --replica: a replica answers only once it has "
                                              "replayed this process's writes."),
    ]


def global_options(func: F) -> F:
    """Put the global options on the group (they are accepted before the command)."""
    params = getattr(func, "__click_params__", [])
    params.extend(reversed(_global_options()))
    func.__click_params__ = params  # type: ignore[attr-defined]
    return func


def add_global_options(group: click.Group) -> None:
    """Give every command the global options too, unless it has an option of the same name."""
    for command in group.commands.values():
        taken = {opt for p in command.params for opt in getattr(p, "opts", ())}
        for option in _global_options():
            if not taken.intersection(option.opts):
                command.params.append(option)


class Context:
    """What a command needs: the resolved settings and, opened on first use, the store."""

    def __init__(self, ctx: click.Context, config: Config) -> None:
        self._flags: dict[str, Any] = ctx.meta.setdefault(FLAGS, {})
        self.config = config
        self.command = ctx.invoked_subcommand
        self._kb: KnowledgeBase | None = None

    @classmethod
    def start(cls, ctx: click.Context, config_path: str | None) -> Context:
        config = load_config(config_path)
        if config.path is not None:
            ctx.default_map = {**config.default_map(), **(ctx.default_map or {})}
        return cls(ctx, config)

    @property
    def db(self) -> str:
        flag = self._flags.get("db")  # an empty --db is passed on, and refused by open()
        return str(flag if flag is not None else
                   os.environ.get("HYBRIDKB_DB") or self.config.db or DEFAULT_DB)

    @db.setter
    def db(self, value: str) -> None:
        self._flags["db"] = value

    @property
    def embedder(self) -> str | None:
        if self._flags.get("no_embedder"):
            return None
        name = self._flags.get("embedder") or os.environ.get("HYBRIDKB_EMBEDDER") \
            or self.config.embedder or DEFAULT_EMBEDDER
        return None if name.strip().lower() in ("none", "off") else name

    @embedder.setter
    def embedder(self, value: str | None) -> None:
        self._flags["no_embedder"] = value is None
        if value is not None:
            self._flags["embedder"] = value

    @property
    def as_json(self) -> bool:
        return bool(self._flags.get("as_json"))

    @as_json.setter
    def as_json(self, value: bool) -> None:
        self._flags["as_json"] = value

    def require_store(self) -> None:
        require_store(self.db)

    def write_nothing(self) -> None:
        """Open the store, when it is opened, keeping no sample of the queries asked."""
        self._flags["read_only"] = True

    def kb(self) -> KnowledgeBase:
        if self._kb is None:
            if self.command in NEEDS_STORE:
                self.require_store()
            options = self.replica_options()
            if not is_postgres_target(self.db):  # derived indexes show a bar when (re)built
                from .cli_common import progress_bar  # (cli_common imports this module)

                options["progress"] = progress_bar
            if self._flags.get("read_only"):  # e.g. `serve --read-only`: not even the query sample
                options["sample_queries"] = False
            if rerank := self._flags.get("rerank") or os.environ.get("HYBRIDKB_RERANK"):
                options["rerank"] = rerank
            self._kb = open_kb(self.db, embedder=self.embedder, **options)
        return self._kb

    def replica_options(self) -> dict[str, Any]:
        """`replicas=` and `read_your_writes=` for open(), when replicas are named."""
        replicas = list(self._flags.get("replicas") or os.environ.get("HYBRIDKB_REPLICAS", "").split())
        if not replicas:
            return {}
        if not is_postgres_target(self.db):
            raise InvalidInputError("--replica needs a postgresql:// store (--db)")
        return {"replicas": replicas, "read_your_writes": bool(self._flags.get("read_your_writes"))}

    def close(self) -> None:
        if self._kb is not None:
            self._kb.close()


def require_store(db: str) -> None:
    """Reading commands do not create a store where there is none (a SQLite path that is missing)."""
    if db.strip() and not is_postgres_target(db) and db != ":memory:" and not Path(db).expanduser().exists():
        raise NotFoundError(f"no store at {db!r}; create one with `hybridkb init` or any write "
                            "(`hybridkb add`, `import`, `index`), or point --db / HYBRIDKB_DB at one")

