-- The pending-embeddings queue: items whose vector is missing or older than their text.
-- Deferred writes (`embed="defer"`) fill it; `embed_pending` drains it; every search asks
-- whether it is empty. A partial index keeps both cheap when the queue is short.
CREATE INDEX items_unembedded ON items (content_hash)
    WHERE embedded_hash IS NULL OR embedded_hash != content_hash;
