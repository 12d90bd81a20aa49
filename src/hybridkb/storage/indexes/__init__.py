"""Derived search indexes: rebuildable projections of the stored items.

A BM25 engine or an ANN graph that makes queries fast at scale lives here. Each one is a
projection of the system of record (the items and vectors a dialect stores): it records
the write it reflects, catches up before answering, and is rebuilt from the items when
missing, stale or damaged, so losing it never loses data.
"""
