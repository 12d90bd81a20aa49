"""The storage layer: the system of record (items, vectors, meta) behind one contract.

`contract` says what KnowledgeBase and the pipeline may ask of a store; `records` and
`codec` hold what every dialect does the same way; `sqlite/` and `postgres/` hold only
their SQL and connection handling; `indexes/` is for derived search indexes.
"""
