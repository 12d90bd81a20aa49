-- Each corpus's item count, kept by triggers in the transaction of every write. Every
-- search resolves its corpora from this list; counting them from the items scanned an
-- index of every item (97 ms at 1M items) each time the store had changed, so a search
-- right after any write (a memory added, another process's commit, the sampled query
-- vectors of storage/asked.py) paid for it. A corpus whose count falls to 0 keeps its row
-- (corpora() lists counts above 0); `check` compares the table with the items and
-- `check --repair` counts them again (maintenance.py).
CREATE TABLE corpus_counts (
    corpus TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO corpus_counts (corpus, n) SELECT corpus, count(*) FROM items GROUP BY corpus;

CREATE TRIGGER items_count_insert AFTER INSERT ON items BEGIN
    INSERT INTO corpus_counts (corpus, n) VALUES (new.corpus, 1)
        ON CONFLICT (corpus) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER items_count_delete AFTER DELETE ON items BEGIN
    UPDATE corpus_counts SET n = n - 1 WHERE corpus = old.corpus;
END;
CREATE TRIGGER items_count_move AFTER UPDATE OF corpus ON items
    WHEN new.corpus IS NOT old.corpus BEGIN
    UPDATE corpus_counts SET n = n - 1 WHERE corpus = old.corpus;
    INSERT INTO corpus_counts (corpus, n) VALUES (new.corpus, 1)
        ON CONFLICT (corpus) DO UPDATE SET n = n + 1;
END;
