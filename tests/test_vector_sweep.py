"""A build's one pass over the rows (vector_sweep.py) gives what each step computed on its
own gives: the cells' assignment, the codes and the queries' exact 10th-best scores, on one
thread or two, over float32 rows or int8 rows with a scale (the stored values themselves)."""

from __future__ import annotations

import numpy as np
import pytest
from test_vector_cells import near_duplicates, queries_near

from hybridkb.storage import codec
from hybridkb.storage.indexes import vector_cells, vector_codes, vector_recall, vector_sweep
from hybridkb.storage.indexes.vector_math import ScaledRows, dot_exact, dot_rows


@pytest.mark.parametrize("scaled", [False, True])
def test_one_pass_on_one_or_two_threads_gives_each_step_s_own_answer(scaled: bool) -> None:
    rows = near_duplicates(2 * vector_sweep.BLOCK + 1_234, 7, dim=32)  # three blocks, the last short
    matrix = ScaledRows(*codec.quantize(rows)) if scaled else rows
    n = len(rows)
    center = vector_codes.center_of(matrix, n)
    trained = vector_cells.train(matrix, n)
    queries = queries_near(rows, 12, seed=3).astype(np.float32)
    cells = vector_cells.build(matrix, n)
    columns = vector_codes.encode_columns(matrix, n, center)
    kth = vector_recall.kth_scores(matrix, queries)
    exact = np.sort(matrix[np.arange(n)] @ queries.T, axis=0)[-vector_recall.K]
    assert np.allclose(kth, exact, atol=1e-6)
    for workers in (1, 2):
        swept = vector_sweep.sweep(matrix, n, center, trained, queries, workers=workers)
        assert np.array_equal(swept.columns, columns)
        assert np.array_equal(swept.kth, kth)
        made = vector_cells.from_assigned(trained, swept.cell, 32)
        assert np.array_equal(made.order, cells.order) and np.array_equal(made.offsets, cells.offsets)
        assert np.array_equal(made.centroids, cells.centroids)
    assert len(np.unique(swept.cell)) > 0.9 * vector_cells.cell_count(n)


def test_a_cancelled_sweep_stops_without_scores() -> None:
    rows = near_duplicates(vector_sweep.BLOCK + 10, 8, dim=16)
    center = vector_codes.center_of(rows, len(rows))
    swept = vector_sweep.sweep(rows, len(rows), center, None, rows[:3], cancelled=lambda: True)
    assert swept.kth is None and swept.cell.size == 0


def test_the_measurement_s_gathered_products_are_those_of_the_gathered_rows() -> None:
    """vector_math.dot_exact (kept buffers) scores as dot_rows of the gathered rows does, bit
    for bit: the build's measured recall and the effort it picks cannot move."""
    rows = near_duplicates(6_000, 9, dim=384)
    matrix = ScaledRows(*codec.quantize(rows))
    q = queries_near(rows, 1, seed=4)[0].astype(np.float32)
    rng = np.random.default_rng(5)
    for count in (1, 1_023, 1_024, 1_025, 5_000):
        picks = np.sort(rng.choice(len(rows), count, replace=False))
        assert np.array_equal(dot_exact(matrix, q, picks), dot_rows(matrix[picks], q))
        assert np.array_equal(dot_exact(rows, q, picks), dot_rows(rows[picks], q))
