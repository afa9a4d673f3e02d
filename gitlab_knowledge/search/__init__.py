"""Hybrid search: BM25 (Tantivy) and vectors (LanceDB) fused with Reciprocal Rank Fusion.

Reads only the LanceDB and Tantivy files, never the live DuckDB file, so it works while a sync runs.
"""
