"""python -m benchmarks.check_cost STORE [--embedder hashing-384] [--runs 3]

What `hybridkb check` costs on an existing SQLite store, whole and in parts: SQLite's
integrity check, every checksum of the text index and of the vector generation
(storage/indexes/verify.py), the text index against the items; and what opening pays
for the quick check. Run it on a copy: the first open may rebuild an index of an older
format, and a vector generation without a manifest is sealed here first (as its build
would have).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import hybridkb
from hybridkb.embedding import get_embedder
from hybridkb.storage.indexes import verify
from hybridkb.storage.indexes.text import read_state
from hybridkb.storage.indexes.vector_base import split_generation


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _timed(run: object) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--embedder", default="hashing-384")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    kb = hybridkb.open(args.store, embedder=get_embedder(args.embedder))
    backend = kb.backend
    kb.search("warm up", mode="fts")  # opens (or rebuilds) the text index
    row = backend._changes.published("vectors")
    gen = backend._vectors.folder / split_generation(row[0])[0] if row else None
    if gen is not None and not (gen / verify.MANIFEST).exists():
        print(f"sealed the generation (a build's read-back): {_timed(lambda: verify.seal(gen)):.2f} s")
    text = backend._text.folder
    print(f"items {backend.count():,}; file {Path(args.store).stat().st_size / 1e6:.0f} MB; text index "
          f"{_size(text) / 1e6:.0f} MB; vector generation {_size(gen) / 1e6 if gen else 0:.0f} MB")
    for _ in range(args.runs):
        total = _timed(kb.check)
        sqlite = _timed(lambda: backend._read("PRAGMA integrity_check"))
        text_sums = _timed(backend._text.problems)
        vector_sums = _timed(lambda: backend._vectors.problems(backend.vector_dim()))
        compare = _timed(lambda: (set(backend._text.current().all_rowids()),
                                  set(backend._changes.item_rowids())))
        print(f"check {total:.2f} s: sqlite integrity_check {sqlite:.2f} s, text checksums "
              f"{text_sums:.2f} s, vector checksums {vector_sums:.2f} s, text vs items {compare:.2f} s")
    stamps = (read_state(text) or {}).get("files")
    quick = _timed(lambda: [verify.text_problems(text, stamps, full=False) for _ in range(100)]) / 100
    print(f"quick check at open: text {quick * 1000:.2f} ms", end="")
    if gen is not None:
        quick = _timed(lambda: [verify.generation_problems(gen, full=False) for _ in range(100)]) / 100
        print(f", vector generation {quick * 1000:.2f} ms")
    kb.close()


if __name__ == "__main__":
    main()
