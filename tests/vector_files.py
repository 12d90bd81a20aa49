"""What the vector-base tests share: the dev data folder, a store's one vector generation,
and random unit rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")


def generation(db: Path) -> Path:
    """The store's only vector generation folder (fails when there is not exactly one)."""
    (found,) = [p for p in (db.with_name(db.name + ".idx") / "vectors").iterdir() if p.is_dir()]
    return found


def unit(n: int, dim: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    out: np.ndarray = m / np.linalg.norm(m, axis=1, keepdims=True)
    return out
