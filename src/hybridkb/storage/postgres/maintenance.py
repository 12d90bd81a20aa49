"""Checking and repairing one PostgreSQL store: what derives from the items must agree with them.

Items and their tsvectors cannot disagree (a generated column); what can is the per-corpus
BM25 statistics and the impact-ordered BM25 index (migration 003) kept by triggers, the
vectors' `embedded_hash` bookkeeping and the vector
index (IVFFlat, ann.py). `repair` rebuilds those from the items inside the caller's write transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import ann
from . import sql as q

if TYPE_CHECKING:
    from psycopg import Connection

def integrity_problems(conn: Connection[Any], dim: int | None, indexed: bool, *,
                       index_min_rows: int) -> list[str]:
    """Empty when sound: statistics, items and vectors agree; the vector index is usable."""
    problems = [
        f"corpus {corpus!r}: {n} items of total length {length}, but its statistics say "
        f"{n_stats} and {length_stats}"
        for corpus, n, n_stats, length, length_stats in conn.execute(q.STATS_CHECK)
        if (n, length) != (n_stats, length_stats)]
    row = conn.execute(q.BM25_CHECK).fetchone()
    if row is not None and not row[0] == row[1] == row[2]:
        problems.append(f"the BM25 index holds {row[1]} postings (its counts say {row[2]}) "
                        f"for {row[0]} (lexeme, item) pairs")
    row = conn.execute(q.PACKED_CHECK).fetchone()
    if row is not None and row[0]:
        problems.append(f"the BM25 index holds {row[0]} blocks whose packed postings do not "
                        f"fit their count")
    if dim is None:
        return problems
    for label, check in q.VECTOR_CHECKS:
        row = conn.execute(check).fetchone()
        if row is not None and row[0]:
            problems.append(f"{row[0]} {label}")
    index = conn.execute(ann.INDEX_VALID).fetchone()
    if index is not None and not index[0]:
        problems.append(f"the vector index is invalid (REINDEX INDEX {ann.INDEX})")
    if not indexed and dim <= ann.MAX_DIM and index_min_rows > 0:
        row = conn.execute("SELECT count(*) FROM item_vectors").fetchone()
        if row is not None and row[0] > index_min_rows:
            problems.append(f"{row[0]} vectors but no vector index")
    return problems


def repair(conn: Connection[Any], dim: int | None, problems: Sequence[str],
           build_index: Callable[[], object]) -> list[str]:
    """Rebuild what `problems` found wrong from the items; returns what was done."""
    done: list[str] = []
    text = " ".join(problems)
    if "statistics say" in text:
        conn.execute("LOCK TABLE items IN SHARE MODE")  # writers wait: their triggers add deltas
        conn.execute("DELETE FROM corpus_stats")
        conn.execute("INSERT INTO corpus_stats (corpus, shard, n_docs, total_len) "
                     "SELECT corpus, 0, count(*), coalesce(sum(length(tsv)), 0) FROM items GROUP BY corpus")
        done.append("recomputed the BM25 corpus statistics from the items")
    if "BM25 index holds" in text:  # postings missing or extra, or packed wrongly
        conn.execute("LOCK TABLE items IN SHARE MODE")
        conn.execute("DELETE FROM bm25_blocks")
        conn.execute("DO $$ BEGIN EXECUTE hybridkb_bm25_sql('add', 'items'); END $$")
        done.append("rebuilt the BM25 index from the items")
    if dim is None:
        return done
    if any(label in text for label, _ in q.VECTOR_CHECKS):
        foreign = conn.execute("DELETE FROM item_vectors WHERE rowid IN "
                               "(SELECT rowid FROM items WHERE embedded_hash IS NULL)").rowcount
        missing = conn.execute(
            "UPDATE items SET embedded_hash = NULL WHERE embedded_hash IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM item_vectors v WHERE v.rowid = items.rowid)").rowcount
        done.append(f"vectors: dropped {foreign} of items not marked embedded; {missing} items "
                    f"without a vector marked for embedding")
    if "vector index is invalid" in text or "no vector index" in text:
        build_index()  # lists chosen and probes measured again, over the rows of today
        done.append("built the vector index")
    return done
