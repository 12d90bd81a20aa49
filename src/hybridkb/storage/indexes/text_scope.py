"""BM25 statistics of the corpora searched, as the PostgreSQL backend takes them.

One tantivy index holds every corpus of a store, and tantivy weighs a term by its
document frequency in the whole index. PostgreSQL counts only the corpora a search
names, so in a store of several corpora a one-corpus search ranked differently on the
two backends (a word common in another corpus looked common here too). A search
limited to some corpora now counts, per query word, the documents of those corpora that
hold it (one tantivy count each, kept until the index changes) and boosts each term by
scoped idf / whole-index idf, which turns tantivy's idf into the scoped one. Only the
average length stays the whole index's (tantivy takes no other), a small difference.
A search of every corpus, or of corpora holding every document, is left as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import tantivy

from . import text_schema as ts
from .text_delta import idf


class CorpusStats:
    """Document count and document frequencies within some corpora of one searcher."""

    def __init__(self, searcher: tantivy.Searcher, schema: tantivy.Schema,
                 corpora: Sequence[str]) -> None:
        self._searcher = searcher
        self._schema = schema
        self._scope = ts.corpus_query(schema, corpora)
        self.docs = count_matches(searcher, self._scope)
        self.whole = int(searcher.num_docs)
        self._df: dict[str, int] = {}

    @property
    def is_whole(self) -> bool:
        """The corpora hold every document: the index's own statistics are theirs."""
        return self.docs >= self.whole

    def doc_freq(self, token: str) -> int:
        """Documents of these corpora holding the analyzed `token`."""
        df = self._df.get(token)
        if df is None:
            if not self._searcher.doc_freq("body", token):
                df = 0
            else:
                term = tantivy.Query.term_query(self._schema, "body", token)
                df = count_matches(self._searcher, tantivy.Query.boolean_query(
                    [(tantivy.Occur.Must, term), (tantivy.Occur.Must, self._scope)]))
            self._df[token] = df
        return df

    def boost(self, words: Sequence[str]) -> float:
        """Scoped idf over whole-index idf for one term (a phrase sums its words' idf, as
        tantivy does)."""
        whole = sum(idf(self.whole, int(self._searcher.doc_freq("body", w))) for w in words)
        scoped = sum(idf(self.docs, self.doc_freq(w)) for w in words)
        return scoped / whole if whole > 0 else 1.0


def count_matches(searcher: tantivy.Searcher, query: tantivy.Query) -> int:
    """Documents of `searcher` matching `query` (`count` is set when asked for, though
    tantivy-py's stub omits it)."""
    return int(getattr(searcher.search(query, 1, count=True), "count", 0) or 0)
