-- The vectors of queries the store was asked (never their text): a bounded sample, most
-- recent kept (storage/asked.py). The IVFFlat index measures its probes on them when it is
-- built or optimized, instead of on pseudo-queries made from the items, which cannot know
-- how far a store's real queries sit from its items (NFCorpus's sit farther than any
-- pseudo-query: recall@10 0.875 at the probes pseudo-queries measured, docs/postgres.md).
CREATE TABLE IF NOT EXISTS query_vectors (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest bigint NOT NULL UNIQUE,
    dim integer NOT NULL,
    vector bytea NOT NULL,
    asked_at double precision NOT NULL
);
