"""The DuckDB store: raw payloads, normalized GitLab data, documents, sync bookkeeping."""
