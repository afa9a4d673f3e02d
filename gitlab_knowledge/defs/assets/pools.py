"""Concurrency pools (limit 1 each, set in dagster.yaml `concurrency.pools.default_limit`).

DuckDB: one writing process per file, and readers are locked out while it writes.
Tantivy: one IndexWriter per index (a second fails with LockBusy).
LanceDB: `optimize()` conflicts with concurrent merges, so every vector-table write shares a pool.
"""

DUCKDB_POOL = "gitlab_knowledge_duckdb"
TANTIVY_POOL = "gitlab_knowledge_tantivy"
LANCEDB_POOL = "gitlab_knowledge_lancedb"
