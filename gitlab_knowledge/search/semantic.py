"""The vector retriever: LanceDB nearest neighbours with the filters applied before the cut.

Rows are chunks; a document scores as its best chunk, so more chunks than documents are asked
for and folded per document until `limit` documents are found (or the table is exhausted).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from gitlab_knowledge.embeddings.vectors import VectorStore, sql_str
from gitlab_knowledge.search.filters import Filters

DISPLAY_COLUMNS = ["doc_id", "chunk", "excerpt", "source_type", "project", "parent_type", "iid", "title", "url",
                   "author", "labels", "state", "created_at", "updated_at", "confidential", "internal"]


@dataclass
class SemanticHit:
    doc_id: str
    distance: float  # LanceDB's squared L2 between unit vectors: 0 (same) … 4 (opposite)
    fields: dict[str, Any]
    excerpt: str

    @property
    def similarity(self) -> float:
        return 1.0 - self.distance / 2.0  # |a-b|² = 2 - 2·cos for unit vectors


def _ts(value: datetime) -> str:
    return f"CAST({sql_str(value.strftime('%Y-%m-%d %H:%M:%S'))} AS TIMESTAMP)"


def where_clause(filters: Filters) -> str | None:
    parts = []
    if filters.types:
        parts.append("source_type IN (" + ", ".join(sql_str(t) for t in filters.types) + ")")
    for column, value in (("project", filters.project), ("author", filters.author), ("state", filters.state)):
        if value:
            parts.append(f"{column} = {sql_str(value)}")
    if filters.labels:
        parts.append("array_has_all(labels, [" + ", ".join(sql_str(label) for label in filters.labels) + "])")
    if filters.after_dt:
        parts.append(f"created_at >= {_ts(filters.after_dt)}")
    if filters.before_dt:
        parts.append(f"created_at < {_ts(filters.before_dt)}")
    if filters.exclude_confidential:
        parts.append("confidential = false")
    if filters.exclude_internal:
        parts.append("internal = false")
    return " AND ".join(parts) or None


def search_vectors(store: VectorStore, vector: np.ndarray, filters: Filters, limit: int,
                   nprobes: int | None = None) -> list[SemanticHit]:
    table = store.table()
    if table is None:
        return []
    where = where_clause(filters)
    fetch = limit * 3
    while True:
        # Naming _distance keeps lance from warning about its auto-projection on every query.
        query = table.search(vector.astype(np.float32)).select([*DISPLAY_COLUMNS, "_distance"]).limit(fetch)
        if nprobes:
            query = query.nprobes(nprobes)
        if where:
            query = query.where(where, prefilter=True)
        rows = query.to_list()
        best: dict[str, SemanticHit] = {}
        for row in rows:
            doc_id = row["doc_id"]
            if doc_id not in best or row["_distance"] < best[doc_id].distance:
                fields = {k: row[k] for k in DISPLAY_COLUMNS if k not in ("chunk", "excerpt")}
                best[doc_id] = SemanticHit(doc_id, float(row["_distance"]), fields, row["excerpt"] or "")
        if len(best) >= limit or len(rows) < fetch:
            return sorted(best.values(), key=lambda h: (h.distance, h.doc_id))[:limit]
        fetch *= 3
