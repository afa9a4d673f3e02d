"""The pipeline's layers, each declared once: every name a layer goes by, in one record.

A layer is known to Dagster by its asset key and group, to its run's metadata by a key prefix, to
`layer_state` by a state name (the layers driven by a watermark), to the concurrency limits by a
pool, and to the code by the module whose `refresh(workspace, project, ...)` brings one project up
to date and the stats type that run returns. The asset keys, groups, metadata prefixes and state
names are stored (Dagster run history, `layer_state` rows): they are the same strings as before
this table existed and must not change.

Only the standard library here, so that any module (the CLI, the sensor's decision, the layers'
own stats types) can read the table without importing Dagster or a layer. The stats type and the
refresh entry point sit above this module, so the record names them and resolves them on demand.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Concurrency pools (limit 1 each, set in dagster.yaml `concurrency.pools.default_limit`).
# DuckDB: one writing process per file, and readers are locked out while it writes.
# Tantivy: one IndexWriter per index (a second fails with LockBusy).
# LanceDB: `optimize()` conflicts with concurrent merges, so every vector-table write shares a pool.
DUCKDB_POOL = "gitlab_knowledge_duckdb"
TANTIVY_POOL = "gitlab_knowledge_tantivy"
LANCEDB_POOL = "gitlab_knowledge_lancedb"


@dataclass(frozen=True)
class Layer:
    name: str  # what the code, the docs and the integrity rules call it
    asset: str  # the Dagster asset key
    group: str  # the Dagster asset group
    prefix: str  # the prefix of its stats' keys in the materialization metadata
    state: str  # its rows in `layer_state` (the `layer` column); "": a layer without a watermark
    pool: str
    module: str  # the module holding the layer's `refresh(workspace, project, ...)`
    stats_name: str  # the name of the stats type that refresh returns, in `stats_module`
    stats_module: str

    @property
    def stats(self) -> type[Any]:
        """The layer's `LayerStats` subclass."""
        stats: type[Any] = getattr(importlib.import_module(self.stats_module), self.stats_name)
        return stats

    @property
    def refresh(self) -> Callable[..., Any]:
        """The layer's entry point: `refresh(workspace, project, ...)` returning its stats."""
        refresh: Callable[..., Any] = importlib.import_module(self.module).refresh
        return refresh


RAW = Layer("raw", asset="raw_gitlab_payloads", group="raw", prefix="", state="", pool=DUCKDB_POOL,
            module="gitlab_knowledge.sync.engine", stats_name="RawStats", stats_module="gitlab_knowledge.sync.stats")
NORMALIZED = Layer("normalized", asset="normalized_gitlab", group="normalized", prefix="changed_", state="normalized",
                   pool=DUCKDB_POOL, module="gitlab_knowledge.normalized.refresh", stats_name="NormalizeStats",
                   stats_module="gitlab_knowledge.normalized.refresh")
# The graph is drawn in the normalized group: it is rebuilt from the normalized rows alone.
GRAPH = Layer("graph", asset="knowledge_graph", group="normalized", prefix="graph_", state="graph", pool=DUCKDB_POOL,
              module="gitlab_knowledge.graph.refresh", stats_name="GraphStats",
              stats_module="gitlab_knowledge.graph.refresh")
DOCUMENTS = Layer("documents", asset="search_documents", group="documents", prefix="documents_", state="documents",
                  pool=DUCKDB_POOL, module="gitlab_knowledge.documents.refresh", stats_name="DocumentStats",
                  stats_module="gitlab_knowledge.documents.refresh")
EMBEDDINGS = Layer("embeddings", asset="document_embeddings", group="index", prefix="embeddings_", state="",
                   pool=LANCEDB_POOL, module="gitlab_knowledge.embeddings.refresh", stats_name="EmbedStats",
                   stats_module="gitlab_knowledge.embeddings.refresh")
LEXICAL = Layer("lexical", asset="lexical_index", group="index", prefix="lexical_", state="", pool=TANTIVY_POOL,
                module="gitlab_knowledge.lexical.refresh", stats_name="LexicalStats",
                stats_module="gitlab_knowledge.lexical.refresh")

# In the order the asset graph runs them.
LAYERS: tuple[Layer, ...] = (RAW, NORMALIZED, GRAPH, DOCUMENTS, EMBEDDINGS, LEXICAL)


def layer(name: str) -> Layer:
    """The layer called `name` (KeyError for another name)."""
    return {each.name: each for each in LAYERS}[name]
