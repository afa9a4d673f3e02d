"""The vector retriever: LanceDB nearest neighbours with the filters applied before the cut.

Rows are chunks; a document scores as its best chunk, so more chunks than documents are asked
for and folded per document until `limit` documents are found (or the table is exhausted).
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import COLUMNS, DocFields
from gitlab_knowledge.embeddings.vectors import VectorStore, sql_in, sql_str
from gitlab_knowledge.search.filters import DATES, FILTERS, Filters, Match, start_of
from gitlab_knowledge.store.viewer_lens import IndexScope

DISPLAY_COLUMNS = ["doc_id", "chunk", "excerpt", *(c.name for c in COLUMNS)]


@dataclass
class SemanticHit:
    doc_id: str
    distance: float  # LanceDB's squared L2 between unit vectors: 0 (same) … 4 (opposite)
    fields: DocFields
    excerpt: str
    chunk: int = 0

    @property
    def similarity(self) -> float:
        return 1.0 - self.distance / 2.0  # |a-b|² = 2 - 2·cos for unit vectors


def _ts(value: datetime) -> str:
    return f"CAST({sql_str(value.strftime('%Y-%m-%d %H:%M:%S'))} AS TIMESTAMP)"


def _values(values: tuple[str, ...]) -> str:
    return ", ".join(sql_str(v) for v in values)


SQL: dict[Match, Callable[[str, Any], str]] = {
    Match.EXACT: lambda column, value: f"{column} = {sql_str(value)}",
    Match.ANY_OF: lambda column, values: f"{column} IN ({_values(values)})",
    Match.ALL_OF: lambda column, values: f"array_has_all({column}, [{_values(values)}])",
    Match.ON_OR_AFTER: lambda column, day: f"{column} >= {_ts(start_of(day))}",
    Match.BEFORE: lambda column, day: f"{column} < {_ts(start_of(day))}",
    Match.EXCLUDE_TRUE: lambda column, _on: f"{column} = false",
    # An empty set matches nothing (`IN ()` is no SQL); its complement, everything.
    Match.IN_SET: lambda column, ids: sql_in(column, sorted(ids)) if ids else "false",
    Match.NOT_IN_SET: lambda column, ids: f"NOT {sql_in(column, sorted(ids))}" if ids else "true",
}


def _scope_sql(_column: str, scope: IndexScope) -> str:
    """A viewer's scope (lexical_retriever.scope_query says it in Tantivy's words)."""
    parts = [] if scope.every_project else \
        [f"project IN ({_values(tuple(sorted(scope.projects)))})" if scope.projects else "false"]
    if scope.guarded:
        confidential = "confidential = true" + (f" AND NOT {sql_in('doc_id', sorted(scope.allowed))}"
                                                if scope.allowed else "")
        unseen = f"(internal = true OR ({confidential}))"
        if not scope.all_guarded:
            unseen = f"(project IN ({_values(tuple(sorted(scope.guarded)))}) AND {unseen})"
        parts.append(f"NOT {unseen}")
    if scope.no_merge_requests:
        parts.append(f"NOT (parent_type = {sql_str(kinds.MERGE_REQUEST.name)} "
                     f"AND project IN ({_values(tuple(sorted(scope.no_merge_requests)))}))")
    if scope.denied:
        parts.append(f"NOT {sql_in('doc_id', sorted(scope.denied))}")
    return "(" + " AND ".join(parts or ["true"]) + ")"


SQL[Match.SCOPE] = _scope_sql


def where_clause(filters: Filters) -> str | None:
    """The filters as a LanceDB (DataFusion SQL) predicate, applied before the nearest-neighbour cut."""
    parts = [SQL[spec.match](spec.column, value) for spec, value in filters.pushed()]
    return " AND ".join(parts) or None


def search_vectors(store: VectorStore, vector: np.ndarray, filters: Filters, limit: int,
                   nprobes: int | None = None) -> list[SemanticHit]:
    table = store.reader()  # reused for a second: listing and opening tables costs more than the scan
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
                fields = DocFields(**{k: row[k] for k in DISPLAY_COLUMNS if k not in ("chunk", "excerpt")})
                best[doc_id] = SemanticHit(doc_id, float(row["_distance"]), fields, row["excerpt"] or "",
                                           chunk=int(row["chunk"]))
        if len(best) >= limit or len(rows) < fetch:
            return sorted(best.values(), key=lambda h: (h.distance, h.doc_id))[:limit]
        fetch *= 3


SCOPE_MASKS = 32  # viewers' masks kept per loaded table (a shared server's recent users)
MEMORY_COLUMNS = ["doc_id", "chunk", "vector", *(c.name for c in COLUMNS)]


def _us(day: date) -> np.datetime64:
    return np.datetime64(start_of(day), "us")


def _filtered_columns(*matches: Match) -> list[str]:
    return list(dict.fromkeys(s.column for s in FILTERS if s.match in matches))


class MemoryVectors:
    """Exact nearest-neighbour search over the vector table held in memory, for processes that
    search many times (benchmarks, an agent server). Loading costs ~0.5 s per 100K chunks; each
    search is then one matrix-vector product (~8 ms at 100K x 384) with the filters as a mask, so
    it has the exact results of the LanceDB scan at a tenth of its latency. The table is reloaded
    when its version changes."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self.version: int | None = None
        self._member_masks: dict[tuple[str, str], np.ndarray] = {}
        self._scope_masks: dict[IndexScope, np.ndarray] = {}

    def _fresh(self) -> bool:
        table = self.store.reader()
        if table is None:
            return False
        if table.version != self.version:
            self._load(table)
        return True

    def _load(self, table: Any) -> None:
        # Batch by batch into one preallocated matrix: no second copy of the vectors (to_arrow plus
        # combine_chunks held two) and no Python object per row for the filter columns.
        rows = table.count_rows()
        dims = table.schema.field("vector").type.list_size
        self.vectors = np.empty((rows, dims), dtype=np.float32)
        meta, at = [], 0
        for batch in table.search().select(MEMORY_COLUMNS).limit(None).to_batches():
            if batch.num_rows == 0:
                continue
            n = min(batch.num_rows, rows - at)
            self.vectors[at:at + n] = batch.column("vector").flatten().to_numpy().reshape(-1, dims)[:n]
            meta.append(pa.Table.from_batches([batch.drop_columns(["vector"])]).slice(0, n))
            at += n
        self.vectors = self.vectors[:at]
        self.meta = pa.concat_tables(meta).combine_chunks() if meta else pa.table({})
        self.doc_ids = self.meta.column("doc_id").to_numpy(zero_copy_only=False) if at else np.array([], object)
        self.codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        for name in _filtered_columns(Match.EXACT, Match.ANY_OF):
            encoded = self.meta.column(name).dictionary_encode().combine_chunks() if at else None
            if encoded is None:
                self.codes[name] = (np.array([], dtype=np.int32), {})
                continue
            lookup = {value: i for i, value in enumerate(encoded.dictionary.to_pylist())}
            self.codes[name] = (encoded.indices.fill_null(-1).to_numpy(), lookup)
        self.times = {name: self.meta.column(name).to_numpy(zero_copy_only=False).astype("datetime64[us]")
                      if at else np.array([], dtype="datetime64[us]") for name in _filtered_columns(*DATES)}
        self.flags = {name: self.meta.column(name).fill_null(False).to_numpy(zero_copy_only=False)
                      if at else np.array([], bool) for name in _filtered_columns(Match.EXCLUDE_TRUE)}
        self._member_masks = {}
        self._scope_masks = {}
        self.version = table.version

    def _member(self, column: str, value: str) -> np.ndarray:
        """Rows whose list `column` holds `value` (cached: label filters repeat)."""
        if (column, value) not in self._member_masks:
            lists = self.meta.column(column).combine_chunks()
            hits = pc.equal(lists.flatten(), value).fill_null(False).to_numpy(zero_copy_only=False)
            rows = pc.list_parent_indices(lists).to_numpy()
            mask = np.zeros(len(self.doc_ids), dtype=bool)
            mask[rows[hits]] = True
            self._member_masks[column, value] = mask
        return self._member_masks[column, value]

    def _equals(self, column: str, values: tuple[str, ...] | list[str]) -> np.ndarray:
        codes, lookup = self.codes[column]
        wanted = [lookup[v] for v in values if v in lookup]
        return np.isin(codes, wanted) if wanted else np.zeros(len(codes), dtype=bool)

    def _ids(self, ids: frozenset[str]) -> np.ndarray:
        if not ids or not len(self.doc_ids):
            return np.zeros(len(self.doc_ids), dtype=bool)
        # Arrow's hash lookup: a set of 100K ids over 100K rows in milliseconds.
        found = pc.is_in(self.meta.column("doc_id"), value_set=pa.array(sorted(ids), pa.string()))
        mask: np.ndarray = found.fill_null(False).to_numpy(zero_copy_only=False)  # pyarrow is untyped
        return mask

    def _all_of(self, column: str, values: tuple[str, ...]) -> np.ndarray:
        keep = np.ones(len(self.doc_ids), dtype=bool)
        for value in values:
            keep &= self._member(column, value)
        return keep

    MASKS: dict[Match, Callable[["MemoryVectors", str, Any], np.ndarray]] = {
        Match.EXACT: lambda self, column, value: self._equals(column, [value]),
        Match.ANY_OF: lambda self, column, values: self._equals(column, values),
        Match.ALL_OF: lambda self, column, values: self._all_of(column, values),
        Match.ON_OR_AFTER: lambda self, column, day: self.times[column] >= _us(day),
        Match.BEFORE: lambda self, column, day: self.times[column] < _us(day),
        Match.EXCLUDE_TRUE: lambda self, column, _on: ~self.flags[column],
        Match.IN_SET: lambda self, _column, ids: self._ids(ids),
        Match.NOT_IN_SET: lambda self, _column, ids: ~self._ids(ids),
        Match.SCOPE: lambda self, _column, scope: self._scope(scope),
    }

    def _scope(self, scope: IndexScope) -> np.ndarray:
        """A viewer's scope as a mask (_scope_sql in numpy), kept per scope while the table stands:
        a viewer's searches repeat it."""
        if scope not in self._scope_masks:
            keep = np.ones(len(self.doc_ids), dtype=bool) if scope.every_project else \
                self._equals("project", tuple(scope.projects))
            if scope.guarded:
                unseen = self.flags["internal"] | (self.flags["confidential"] & ~self._ids(scope.allowed))
                if not scope.all_guarded:
                    unseen &= self._equals("project", tuple(scope.guarded))
                keep &= ~unseen
            if scope.no_merge_requests:
                parent = pc.equal(self.meta.column("parent_type"), kinds.MERGE_REQUEST.name)
                keep &= ~(parent.fill_null(False).to_numpy(zero_copy_only=False)
                          & self._equals("project", tuple(scope.no_merge_requests)))
            if scope.denied:
                keep &= ~self._ids(scope.denied)
            while len(self._scope_masks) >= SCOPE_MASKS:
                self._scope_masks.pop(next(iter(self._scope_masks)))
            self._scope_masks[scope] = keep
        return self._scope_masks[scope]

    def mask(self, filters: Filters) -> np.ndarray:
        keep = np.ones(len(self.doc_ids), dtype=bool)
        for spec, value in filters.pushed():
            keep &= self.MASKS[spec.match](self, spec.column, value)
        return keep

    def search(self, vector: np.ndarray, filters: Filters, limit: int) -> list[SemanticHit]:
        if not self._fresh() or not len(self.doc_ids):
            return []
        scores = self.vectors @ vector.astype(np.float32)
        if next(filters.pushed(), None) is not None:  # a query's phrases/exclusions resolve to ids alone
            scores[~self.mask(filters)] = -np.inf
        candidates = int(np.isfinite(scores).sum())
        if candidates == 0:
            return []
        fetch = min(limit * 3, candidates)
        while True:
            top = np.argpartition(-scores, fetch - 1)[:fetch] if fetch < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            best: dict[str, int] = {}
            for row in top:
                if not np.isfinite(scores[row]):
                    break
                best.setdefault(self.doc_ids[row], int(row))
            if len(best) >= limit or fetch >= candidates:
                break
            fetch = min(fetch * 3, candidates)
        rows = sorted(best.values(), key=lambda r: (-scores[r], self.doc_ids[r]))[:limit]
        picked = self.meta.take(pa.array(rows, pa.int64())).to_pylist()
        # |a-b|² = 2 - 2·cos for unit vectors: the same distance LanceDB reports.
        return [SemanticHit(m["doc_id"], float(2.0 - 2.0 * scores[r]),
                            DocFields(**{k: m[k] for k in DISPLAY_COLUMNS if k not in ("chunk", "excerpt")}), "",
                            chunk=int(m["chunk"])) for r, m in zip(rows, picked, strict=True)]
