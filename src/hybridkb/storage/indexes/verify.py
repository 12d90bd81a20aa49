"""Checksums of the derived indexes' files: damage is found, never answered from.

Two kinds of file. A vector generation is written once, by us: its build ends with a
manifest (`manifest.json`: size, CRC-32 and mtime of every file) written before the
generation is published (`seal`). tantivy writes its own segment files, each ending in
a footer that holds the CRC-32 of the bytes before it (tantivy's `Footer`); the text
index's state file records their sizes and mtimes after each commit (`text_stamps`).

Opening an index checks cheaply (`generation_problems(full=False)`, `text_problems`):
every file present with its recorded size, and a file whose mtime differs from the record
(written since, or copied without its times) has its checksum read. `hybridkb check`
reads every checksum (`full=True`): about 1 GB/s of index on one core.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
_CHUNK = 8 << 20
# tantivy's footer: JSON {"version": ..., "crc": n}, then its length (u32) and this magic (u32)
_TANTIVY_MAGIC = 1337
_TANTIVY_FOOTER_MAX = 50_000
# Files this process verified in full since they last changed: path -> (size, mtime_ns, ino)
_verified: dict[str, tuple[int, int, int]] = {}
_verified_lock = threading.Lock()


def crc32_of(path: Path, length: int | None = None) -> int:
    """CRC-32 of the file's first `length` bytes (all when None), read in 8 MB chunks."""
    crc = 0
    left = length
    with open(path, "rb", buffering=0) as f:
        while left is None or left > 0:
            chunk = f.read(_CHUNK if left is None else min(_CHUNK, left))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            if left is not None:
                left -= len(chunk)
    if left:
        raise OSError(f"{path.name} ends {left} bytes early")
    return crc


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino


def _remember(path: Path, st: os.stat_result) -> None:
    with _verified_lock:
        if len(_verified) > 100_000:
            _verified.clear()
        _verified[str(path)] = _stamp(st)


def _known_good(path: Path, st: os.stat_result) -> bool:
    return _verified.get(str(path)) == _stamp(st)


# -- vector generations: a manifest written by the build --------------------------------------


def seal(folder: Path) -> None:
    """Write the manifest of every file in `folder` (a generation about to be published)."""
    files: dict[str, dict[str, int]] = {}
    for path in sorted(folder.iterdir()):
        if path.name == MANIFEST or not path.is_file():
            continue
        st = path.stat()
        files[path.name] = {"size": st.st_size, "crc32": crc32_of(path), "mtime_ns": st.st_mtime_ns}
    tmp = folder / f"{MANIFEST}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"checksum": "crc32", "files": files}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def generation_problems(folder: Path, *, full: bool) -> list[str]:
    """What is wrong with a sealed generation's files (empty: sound). Without `full`, only
    files changed since the manifest (by size or mtime) have their checksum read."""
    if not folder.is_dir():
        return [f"{folder.name} is missing, or a file stands where a folder above it belongs"]
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files: Mapping[str, Any] = manifest["files"]
        if not isinstance(files, Mapping) or not files:
            raise ValueError("no files listed")
    except FileNotFoundError:
        return [f"{folder.name}: no checksum manifest (written by an older version, or damaged)"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{folder.name}/{MANIFEST} is unreadable: {exc}"]
    problems: list[str] = []
    for name, rec in files.items():
        problem = _file_problem(folder / name, rec, full=full)
        if problem:
            problems.append(f"{folder.name}/{name}: {problem}")
    return problems


Stamps = tuple[tuple[str, int, int], ...]
RECHECK_S = 0.25  # an open generation's files are stat'ed again at most this often


def stamps(folder: Path, names: tuple[str, ...]) -> Stamps:
    """(path, size, mtime) of the files of `names` that exist: what `same` compares."""
    out = []
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(folder / name)
            out.append((str(folder / name), st.st_size, st.st_mtime_ns))
    return tuple(out)


def same(seen: Stamps) -> bool:
    """Whether the files are still the ones stamped: a stat each (5-10 us on a busy machine),
    so a file rewritten or cut short under an open map is seen before it is read."""
    try:
        for path, size, mtime in seen:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return False
    except OSError:
        return False
    return True


def _file_problem(path: Path, rec: Any, *, full: bool) -> str | None:
    try:
        size, crc, mtime = int(rec["size"]), int(rec["crc32"]), int(rec["mtime_ns"])
        st = path.stat()
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"cannot be checked: {exc}"
    if not path.is_file():
        return "not a file"
    if st.st_size != size:
        return f"{st.st_size:,} bytes where {size:,} were written"
    if not full and (st.st_mtime_ns == mtime or _known_good(path, st)):
        return None
    try:
        if crc32_of(path) != crc:
            return "checksum differs from the one written (the file was changed or damaged)"
    except OSError as exc:
        return f"cannot be read: {exc}"
    _remember(path, st)
    return None


# -- the tantivy text index: tantivy's own footers, our stamps -------------------------------


def segment_files(folder: Path) -> tuple[list[str], list[str]]:
    """(the files of the segments meta.json lists, what is missing among those it names:
    a segment without files, a deletes file)."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    names = os.listdir(folder)
    files: list[str] = []
    missing: list[str] = []
    for seg in meta.get("segments", []):
        prefix = str(seg["segment_id"]).replace("-", "") + "."
        own = [n for n in names if n.startswith(prefix)]
        if not own:
            missing.append(f"segment {prefix[:-1]}")
        deletes = seg.get("deletes")
        if isinstance(deletes, Mapping) and f"{prefix}{deletes.get('opstamp')}.del" not in own:
            missing.append(f"{prefix}{deletes.get('opstamp')}.del")
        files.extend(own)
    return sorted(files), missing


def text_stamps(folder: Path) -> dict[str, list[int]]:
    """Size and mtime of each file of the index's live segments (recorded after a commit)."""
    files, _ = segment_files(folder)
    out: dict[str, list[int]] = {}
    for name in files:
        st = (folder / name).stat()
        out[name] = [st.st_size, st.st_mtime_ns]
    return out


_TEXT_ATTEMPTS = 3


def text_problems(folder: Path, stamps: Mapping[str, Any] | None, *, full: bool) -> list[str]:
    """What is wrong with the text index's live segment files (empty: sound). Without `full`,
    only files whose size or mtime differ from `stamps` (or that it does not list) have
    their footer checksum read. A commit or merge that ends while the files are read (the
    store's own text sync, another process) removes segments meta.json listed before it: when
    meta.json changed meanwhile, the new list is checked instead of reporting them gone."""
    problems: list[str] = []
    for _ in range(_TEXT_ATTEMPTS):
        before = _meta_bytes(folder)
        problems = _text_problems_now(folder, stamps, full=full)
        if not problems or _meta_bytes(folder) == before:
            break
    return problems


def _meta_bytes(folder: Path) -> bytes | None:
    try:
        return (folder / "meta.json").read_bytes()
    except OSError:
        return None


def _text_problems_now(folder: Path, stamps: Mapping[str, Any] | None, *, full: bool) -> list[str]:
    try:
        files, missing = segment_files(folder)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"meta.json is unreadable: {exc}"]
    problems = [f"{name}: missing" for name in missing]
    stamps = stamps or {}
    live = {f.split(".")[0] for f in files}
    problems += [f"{name}: missing" for name in stamps  # a recorded file of a live segment
                 if name not in files and name.split(".")[0] in live]
    for name in files:
        path = folder / name
        try:
            st = path.stat()
        except OSError as exc:
            problems.append(f"{name}: cannot be read: {exc}")
            continue
        rec = stamps.get(name)
        if rec is not None and list(rec)[:1] != [st.st_size]:
            problems.append(f"{name}: {st.st_size:,} bytes where {int(rec[0]):,} were written")
            continue
        if not full and ((rec is not None and list(rec) == [st.st_size, st.st_mtime_ns])
                         or _known_good(path, st)):
            continue
        problem = _footer_problem(path, st.st_size)
        if problem:
            problems.append(f"{name}: {problem}")
        else:
            _remember(path, st)
    return problems


def _footer_problem(path: Path, size: int) -> str | None:
    """Whether a tantivy file's bytes match the CRC-32 in its footer."""
    try:
        with open(path, "rb") as f:
            if size < 8:
                return "too short to hold tantivy's footer"
            f.seek(size - 8)
            length, magic = struct.unpack("<II", f.read(8))
            if magic != _TANTIVY_MAGIC or length > min(_TANTIVY_FOOTER_MAX, size - 8):
                return "tantivy's footer is damaged"
            f.seek(size - 8 - length)
            footer = json.loads(f.read(length))
        expected = int(footer["crc"])
        if crc32_of(path, size - 8 - length) != expected:
            return "checksum differs from tantivy's footer (the file was changed or damaged)"
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return f"tantivy's footer cannot be read: {exc}"
    return None
