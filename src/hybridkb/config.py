"""The optional config file, `hybridkb.toml`: default store, embedder, corpora, serve options.

Looked for in the current folder, else in the user config folder
(`~/.config/hybridkb/hybridkb.toml` on Linux, from click's `get_app_dir`);
`--config PATH` or `HYBRIDKB_CONFIG` names one explicitly. A setting is taken
from the first of: the command-line flag, the environment variable, the file,
the built-in default. Relative store paths are relative to the file's folder.

    db = "notes.db"                 # or a postgresql:// URL
    embedder = "default"            # default, hashing-DIM, none
    corpora = ["notes", "wiki"]     # what `hybridkb search` searches when no --corpus is given

    [serve]
    http = true
    host = "127.0.0.1"
    port = 8765
    read_only = false
    corpora = ["notes"]
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidInputError

FILE_NAME = "hybridkb.toml"
APP_NAME = "hybridkb"

_TOP: dict[str, type] = {"db": str, "embedder": str, "corpora": list, "serve": dict}
_SERVE: dict[str, type] = {"http": bool, "host": str, "port": int, "read_only": bool, "corpora": list}


@dataclass(frozen=True, slots=True)
class Config:
    """What a config file says; empty when there is none."""

    path: Path | None = None
    db: str | None = None
    embedder: str | None = None
    corpora: tuple[str, ...] = ()
    serve: dict[str, Any] = field(default_factory=dict)

    def default_map(self) -> dict[str, dict[str, Any]]:
        """Defaults for click's `default_map`, by command and parameter name (flag > env > these)."""
        out: dict[str, dict[str, Any]] = {}
        if self.corpora:
            out["search"] = {"corpora": list(self.corpora)}
        serve = {("use_http" if k == "http" else k): v for k, v in self.serve.items() if k != "corpora"}
        if "corpora" in self.serve:
            serve["corpora_csv"] = ",".join(self.serve["corpora"])
        if serve:
            out["serve"] = serve
        return out


def user_config_dir() -> Path:
    import click

    return Path(click.get_app_dir(APP_NAME))


def find_config(explicit: str | None = None, cwd: Path | None = None) -> Path | None:
    """The file to read: `explicit` (must exist), else ./hybridkb.toml, else the user's one."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise InvalidInputError(f"no config file at {str(path)!r}")
        return path
    for candidate in ((cwd or Path.cwd()) / FILE_NAME, user_config_dir() / FILE_NAME):
        if candidate.is_file():
            return candidate
    return None


def _check(table: dict[str, Any], schema: dict[str, type], where: str) -> None:
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise InvalidInputError(f"{where}: unknown setting(s) {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(schema))}")
    for key, kind in schema.items():
        if key not in table:
            continue
        value: Any = table[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InvalidInputError(f"{where}: {key} must be a {kind.__name__}, not {value!r:.60}")
        if isinstance(value, list) and not all(isinstance(v, str) and v for v in value):
            raise InvalidInputError(f"{where}: {key} must be a list of corpus names (strings)")


def parse_config(text: str, path: Path) -> Config:
    """Validate a file's TOML text into a Config; mistakes name the file and the setting."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInputError(f"config {path}: not valid TOML: {exc}") from exc
    _check(data, _TOP, f"config {path}")
    serve = data.get("serve", {})
    _check(serve, _SERVE, f"config {path} [serve]")
    if "port" in serve and not 0 < serve["port"] < 65536:
        raise InvalidInputError(f"config {path} [serve]: port must be 1 to 65535")
    db = data.get("db")
    if db is not None and "://" not in db and db != ":memory:":
        db = str((path.parent / Path(db).expanduser()).resolve()) if not Path(db).is_absolute() else db
    return Config(path=path, db=db, embedder=data.get("embedder"),
                  corpora=tuple(data.get("corpora", ())), serve=dict(serve))


def load_config(explicit: str | None = None) -> Config:
    """The config in force: `explicit` path, else $HYBRIDKB_CONFIG, else the first file found."""
    path = find_config(explicit or os.environ.get("HYBRIDKB_CONFIG") or None)
    if path is None:
        return Config()
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"config {path}: cannot read it: {exc}") from exc
    return parse_config(text, path)
