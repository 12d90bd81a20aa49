"""Speed benchmarks for hybridkb: `python -m benchmarks --help`.

Every hybridkb figure is measured beside a baseline on the same items and
queries in the same process (bm25s for BM25, an exact numpy matrix product for
vectors), and reported as a ratio to it, because absolute timings on a shared
machine are noisy.
"""
