"""The BM25 text index: a tantivy index in a folder beside the store, or in memory.

A projection of the items, never a source of truth: it records the change-log
sequence it reflects in a small state file written after each tantivy commit
(a crash between the two only makes the next catch-up replay changes it already
has, and replaying is idempotent: every change deletes the item's document by rowid
and adds its current one). Several processes share one folder; whoever catches up
holds the folder's lock file (see `sync.py`), readers reload to see a commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Iterable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import tantivy

from ...model import Filters
from ...querysyntax import TextMatch
from ...textquery import TextQuery
from . import text_schema as ts
from . import verify
from .health import engine_failure
from .text_delta import IndexStats
from .text_scope import CorpusStats, count_matches

STATE_FILE = "hkb-state.json"
_WRITER_HEAP = 64_000_000
_BULK_HEAP = 512_000_000  # two threads, 256 MB each
_MAX_HITS = 100_000


class IndexUnusable(Exception):
    """The index folder is missing, damaged, of another format or of another store."""


# e.g. "tantivy v0.27.0, index_format v7": an index another version wrote is rebuilt.
_TANTIVY = str(getattr(tantivy, "__version__", "unknown"))


def _format(repeat: int) -> dict[str, Any]:
    return {"schema": ts.SCHEMA_VERSION, "tantivy": _TANTIVY, "title_repeat": repeat}


class TextIndex:
    """One tantivy index. `seq` is the change-log sequence its last commit reflects."""

    def __init__(self, index: tantivy.Index, folder: Path | None, state: dict[str, Any],
                 shadow: Path | None = None) -> None:
        self._index = index
        self._shadow = shadow  # a read-only folder is opened through links in a temporary one
        self._index.register_tokenizer(ts.ANALYZER, ts.analyzer())
        self._analyzer = ts.analyzer()
        self.schema = ts.build_schema()
        self.folder = folder
        self._state = state
        self._avgdl: float | None = None
        self._scopes: dict[tuple[str, ...], CorpusStats] = {}  # until the next reload
        self._snap: tuple[Any, dict[Any, bool]] | None = None  # see _snapshot()

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def create(cls, folder: Path | None, store_id: str, *, title_repeat: int = ts.TITLE_REPEAT
               ) -> TextIndex:
        """A new, empty index (an existing folder is wiped first)."""
        state = {**_format(title_repeat), "store": store_id, "seq": 0, "generation": uuid.uuid4().hex}
        if folder is None:
            return cls(tantivy.Index(ts.build_schema()), None, state)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        index = cls(tantivy.Index(ts.build_schema(), path=str(folder), reuse=False), folder, state)
        index._write_state()
        return index

    @classmethod
    def open(cls, folder: Path, store_id: str, *, title_repeat: int = ts.TITLE_REPEAT) -> TextIndex:
        """The index in `folder`; IndexUnusable when it must be rebuilt."""
        state = read_state(folder)
        if state is None:
            raise IndexUnusable(f"no text index state in {folder}")
        wanted = _format(title_repeat)
        if {k: state.get(k) for k in wanted} != wanted:
            raise IndexUnusable(f"text index format {[state.get(k) for k in wanted]} "
                                f"is not this version's {list(wanted.values())}")
        if state.get("store") != store_id:
            raise IndexUnusable("text index belongs to another store")
        damage = verify.text_problems(folder, state.get("files"), full=False)
        if damage:
            raise IndexUnusable(f"text index is damaged: {'; '.join(damage[:3])}")
        shadow = None
        try:
            if not os.access(folder, os.W_OK):  # tantivy takes a lock file even to read
                shadow = _shadow(folder)
            index = tantivy.Index.open(str(shadow or folder))
            out = cls(index, folder, state, shadow)
            out._index.searcher()
        except BaseException as exc:  # OSError, ValueError, a panic of the engine
            if shadow is not None:
                shutil.rmtree(shadow, ignore_errors=True)
            if not engine_failure(exc):
                raise
            raise IndexUnusable(f"text index is damaged: {exc}") from exc
        if shadow is not None:
            weakref.finalize(out, shutil.rmtree, shadow, True)
        return out

    def problems(self, *, full: bool) -> list[str]:
        """What is wrong with the files of the commit this handle reads (verify.py)."""
        if self.folder is None:
            return []
        return verify.text_problems(self.folder, self._state.get("files"), full=full)

    @property
    def shadowed(self) -> bool:
        """Opened through links (its folder was read-only): searched, never written."""
        return self._shadow is not None

    @property
    def title_repeat(self) -> int:
        return int(self._state.get("title_repeat", ts.TITLE_REPEAT))

    @property
    def seq(self) -> int:
        return int(self._state["seq"])

    @property
    def generation(self) -> str:
        return str(self._state["generation"])

    def _write_state(self) -> None:
        if self.folder is None:
            return
        # what the commit wrote, so a reader finds a file changed since (verify.py)
        self._state = {**self._state, "files": verify.text_stamps(self.folder)}
        tmp = self.folder / f"{STATE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(self._state), encoding="utf-8")
        os.replace(tmp, self.folder / STATE_FILE)

    def reload(self) -> None:
        """See the last commit of any process (and its state); IndexUnusable when the files
        of that commit are not the ones it wrote."""
        if self.folder is not None:
            state = read_state(self.folder)
            if state is not None:
                self._state = state
            damage = self.problems(full=False)
            if damage:
                raise IndexUnusable(f"text index is damaged: {'; '.join(damage[:3])}")
            if self._shadow is not None:
                _link_into(self.folder, self._shadow)
        try:
            self._index.reload()
        except BaseException as exc:
            if not engine_failure(exc):
                raise
            raise IndexUnusable(f"text index cannot be reloaded: {exc}") from exc
        self._forget_statistics()

    def _forget_statistics(self) -> None:
        self._avgdl = None
        self._scopes = {}
        self._snap = None

    def _snapshot(self) -> tuple[Any, dict[Any, bool]]:
        """The searcher every read uses until the next reload, and what is known about its
        documents (which filters keep all of them: `_needed`)."""
        snap = self._snap
        if snap is None:
            snap = self._snap = (self._index.searcher(), {})
        return snap

    def _needed(self, searcher: Any, facts: dict[Any, bool], corpora: Sequence[str] | None,
                filters: Filters, now: float) -> tuple[Sequence[str] | None, Filters]:
        """The corpus, expiry and staleness filters that would drop a document of this
        snapshot; the others are left out. A filter is a MUST clause, and intersecting with
        it costs most of a top-k search (4 ms of 4.7 at 100k documents, top 300) even when
        it keeps everything, as the default filters over every corpus usually do."""
        if corpora and self._scope(searcher, corpora) is None:  # they hold every document
            corpora = None
        if not filters.include_stale:
            if "stale" not in facts:  # "no document is stale", kept for the snapshot
                facts["stale"] = count_matches(
                    searcher, tantivy.Query.term_query(self.schema, "stale", True)) == 0
            if facts["stale"]:
                filters = dataclasses.replace(filters, include_stale=True)
        if not filters.include_expired and now < self._first_expiry(searcher, facts):
            filters = dataclasses.replace(filters, include_expired=True)
        return corpora, filters

    def _first_expiry(self, searcher: Any, facts: dict[Any, Any]) -> float:
        """The earliest expiry of a document in this snapshot (inf: none expires)."""
        if "expiry" not in facts:
            finite = tantivy.Query.range_query(self.schema, "expires", tantivy.FieldType.Float,
                                               None, ts.NEVER, include_upper=False)
            hits = searcher.search(finite, 1, count=False, order_by_field="expires",
                                   order=tantivy.Order.Asc).hits
            facts["expiry"] = float(hits[0][0]) if hits else float("inf")
        return float(facts["expiry"])

    # -- writes ---------------------------------------------------------------------------------

    def writer(self, *, bulk: bool, threads: int = 2) -> Any:
        """A tantivy writer. Rebuilds and bulk feeds index many documents: two indexing
        threads with a wider heap took a fifth to a third off a rebuild's time (100k items,
        2 cores: 8.4 s at 64 MB per thread, 6.7 s at 256); small catch-ups keep one. A
        bulk feed asks for its own number of `threads` (sync.FEED_THREADS)."""
        if self._shadow is not None:  # its commits would land in the temporary folder
            raise IndexUnusable("the text index was opened read-only")
        if bulk:
            return self._index.writer(heap_size=_BULK_HEAP, num_threads=threads)
        return self._index.writer(heap_size=_WRITER_HEAP, num_threads=1)

    def commit(self, writer: Any, seq: int) -> None:
        """Commit `writer` (which holds every change up to `seq`) and record `seq`."""
        try:
            writer.commit()
            writer.wait_merging_threads()
        except BaseException:
            with contextlib.suppress(Exception):
                writer.rollback()
            raise
        # Reload before the new sequence shows: a search that sees the sequence (and drops
        # those writes from its delta) must also see the commit.
        self._index.reload()
        self._forget_statistics()
        self._state = {**self._state, "seq": int(seq)}
        self._write_state()

    def apply(self, docs: Iterable[ts.TextDoc], removed: Iterable[int], seq: int,
              *, fresh: bool = False) -> int:
        """Make the index hold `docs` (replacing any document of the same rowid) and no
        document of the `removed` rowids, then commit and record `seq`. `fresh` skips the
        deletes (a rebuild into an empty index). Returns how many documents were added."""
        writer = self.writer(bulk=fresh)
        added = 0
        try:
            if not fresh:
                for rowid in removed:
                    writer.delete_documents_by_term("rowid", int(rowid))
            for doc in docs:
                if not fresh:
                    writer.delete_documents_by_term("rowid", doc.rowid)
                writer.add_document(ts.to_document(doc, self.title_repeat))
                added += 1
        except BaseException:
            with contextlib.suppress(Exception):
                writer.rollback()
            raise
        try:
            self.commit(writer, seq)
        finally:
            del writer  # drops tantivy's writer lock for other processes
        return added

    # -- reads ----------------------------------------------------------------------------------

    def analyze(self, text: str) -> list[str]:
        """Text as the index's analyzer tokenizes it."""
        return list(self._analyzer.analyze(text))

    def _scope(self, searcher: tantivy.Searcher, corpora: Sequence[str] | None
               ) -> CorpusStats | None:
        """The statistics of `corpora` when they are not the whole index (text_scope.py)."""
        if not corpora:
            return None
        key = tuple(sorted(set(corpora)))
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = CorpusStats(searcher, self.schema, key)
        return None if scope.is_whole else scope

    def stats(self, query: TextQuery, corpora: Sequence[str] | None = None) -> IndexStats:
        """Document count, average body length and document frequencies (of `corpora`, when
        they are not the whole index), for scoring the delta alike. tantivy-py shows the
        average length only in a score explanation, so one is asked for (of the query's
        first indexed term) and kept until the next reload."""
        searcher, _ = self._snapshot()
        docs = int(searcher.num_docs)
        if self._avgdl is None and docs:
            for term in query.terms:
                toks = [t for w in term for t in self._analyzer.analyze(w)]
                if not toks or not searcher.doc_freq("body", toks[0]):
                    continue
                q = tantivy.Query.term_query(self.schema, "body", toks[0], index_option="freq")
                hits = searcher.search(q, 1, count=False).hits
                if hits:
                    self._avgdl = _avgdl(json.loads(q.explain(searcher, hits[0][1]).to_json()))
                    break
        scope = self._scope(searcher, corpora)
        if scope is not None:
            return IndexStats(docs=scope.docs, avgdl=self._avgdl or 0.0, doc_freq=scope.doc_freq)
        return IndexStats(docs=docs, avgdl=self._avgdl or 0.0,
                          doc_freq=lambda tok: int(searcher.doc_freq("body", tok)))

    def search(
        self, query: TextQuery, *, corpora: Sequence[str] | None, filters: Filters, now: float,
        limit: int, rowids: Sequence[int] | None = None, exclude: Sequence[int] = (),
        match: TextMatch | None = None,
    ) -> list[tuple[int, float]]:
        """(rowid, BM25 score) best first, ties by rowid; filters applied inside the index;
        `exclude`d rowids (those the delta holds newer versions of) never come back. A search
        of some corpora weighs terms by those corpora's statistics (text_scope.py)."""
        if limit <= 0 or query.is_empty:
            return []
        words = ts.term_words(query, self._analyzer.analyze)
        if not words:
            return []
        searcher, facts = self._snapshot()
        terms = [ts.term_query(self.schema, w) for w in words]
        scope = self._scope(searcher, corpora)
        if scope is not None:
            terms = [tantivy.Query.boost_query(t, scope.boost(w))
                     for t, w in zip(terms, words, strict=True)]
        corpora, filters = self._needed(searcher, facts, corpora, filters, now)
        clauses = ts.filter_clauses(self.schema, corpora, filters, now, rowids)
        clauses += ts.match_clauses(self.schema, match, self._analyzer.analyze)
        if exclude:
            clauses.append((tantivy.Occur.MustNot, tantivy.Query.term_set_query(
                self.schema, "rowid", [int(r) for r in exclude])))
        # `hits` builds a new list of Python objects on every access (50 us for 300): once.
        hits = searcher.search(ts.search_query(self.schema, terms, clauses),
                               min(limit, _MAX_HITS), count=False).hits
        if not hits:
            return []
        rowids_found = searcher.fast_field_values("rowid", [addr for _, addr in hits])
        pairs = list(zip(rowids_found, [s for s, _ in hits], strict=True))
        if None in rowids_found:  # a document without its rowid (never written so): skipped
            pairs = [p for p in pairs if p[0] is not None]
        # Best first, ties by rowid: two stable sorts on C keys (a tuple key per hit cost more).
        pairs.sort(key=itemgetter(0))
        pairs.sort(key=itemgetter(1), reverse=True)
        return pairs

    def _within(self, corpora: Sequence[str] | None, exclude: Sequence[int]) -> tantivy.Query:
        """The documents of `corpora` (None: all) but the `exclude`d rowids."""
        clauses = [(tantivy.Occur.Must, ts.corpus_query(self.schema, corpora) if corpora is not None
                    else tantivy.Query.all_query())]
        if exclude:
            clauses.append((tantivy.Occur.MustNot, tantivy.Query.term_set_query(
                self.schema, "rowid", [int(r) for r in exclude])))
        return tantivy.Query.boolean_query(clauses)

    def rows_matching(self, query: tantivy.Query, corpora: Sequence[str] | None,
                      exclude: Sequence[int] = ()) -> set[int]:
        """Every rowid of `corpora` whose document `query` matches (`exclude`d ones left out:
        the delta holds their current versions)."""
        searcher, _ = self._snapshot()
        n = int(searcher.num_docs)
        if n == 0:
            return set()
        whole = tantivy.Query.boolean_query([
            (tantivy.Occur.Must, query), (tantivy.Occur.Must, self._within(corpora, exclude))])
        hits = searcher.search(whole, n, count=False).hits
        return {int(r) for r in searcher.fast_field_values("rowid", [a for _, a in hits]) if r is not None}

    def prefix_words(self, prefix: str, corpora: Sequence[str] | None,
                     exclude: Sequence[int] = ()) -> tuple[str, dict[str, int]]:
        """(the prefix's stem, the indexed words starting with it and how many documents of
        `corpora` hold each): what a `prefix*` query scores."""
        stems = self._analyzer.analyze(prefix)
        if not stems:
            return "", {}
        searcher, _ = self._snapshot()
        if not searcher.num_docs:
            return stems[0], {}
        found = searcher.terms_with_prefix("body", stems[0], filter_query=self._within(corpora, exclude))
        return stems[0], {str(term): int(count) for term, count in found if count}

    def doc_count(self) -> int:
        return int(self._index.searcher().num_docs)

    def all_rowids(self) -> list[int]:
        """Every rowid the index holds (for consistency checks)."""
        searcher = self._index.searcher()
        n = searcher.num_docs
        if n == 0:
            return []
        result = searcher.search(tantivy.Query.all_query(), n, count=False)
        return [int(r) for r in searcher.fast_field_values("rowid", [a for _, a in result.hits])
                if r is not None]

    def doc_freq(self, word: str) -> int:
        """Documents holding an analyzed form of `word` (scoped BM25 statistics start here)."""
        toks = self._analyzer.analyze(word)
        return int(self._index.searcher().doc_freq("body", toks[0])) if toks else 0


def _shadow(folder: Path) -> Path:
    """A temporary folder of links to a read-only index's files, where tantivy can take
    its lock files: the last committed index, searched as it is."""
    shadow = Path(tempfile.mkdtemp(prefix="hybridkb-text-"))
    _link_into(folder, shadow)
    return shadow


def _link_into(folder: Path, shadow: Path) -> None:
    for name in os.listdir(folder):
        if name.endswith(".lock") or (shadow / name).is_symlink():
            continue
        os.symlink(folder / name, shadow / name)


class StateReader:
    """A folder's state file as `read_state` reads it, read again only when a stat of the
    file differs (every search asks; a read and a JSON parse cost about 5% of a search).
    The file is replaced whole (`os.replace` of a new file): its inode changes, and with it
    the size, mtime and ctime are compared."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / STATE_FILE
        self._seen: tuple[int, int, int, int] | None = None
        self._state: dict[str, Any] | None = None

    def read(self) -> dict[str, Any] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            self._seen = None
            return None
        seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if seen != self._seen:  # a file replaced after the stat is read again next time
            self._state = read_state(self.path.parent)
            self._seen = seen if self._state is not None else None
        return self._state


def read_state(folder: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("seq"), int) else None


def _avgdl(explanation: Any) -> float | None:
    """The "avgdl" value inside a tantivy score explanation (JSON), if any."""
    if isinstance(explanation, dict):
        if str(explanation.get("description", "")).startswith("avgdl"):
            return float(explanation["value"])
        for child in explanation.get("details", []) or []:
            found = _avgdl(child)
            if found is not None:
                return found
    return None
