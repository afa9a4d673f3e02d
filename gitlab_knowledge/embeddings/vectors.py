"""The LanceDB side: one vector table per (provider, model), plus a table of embedding failures.

Each row is one chunk of one document and carries everything search filters on and shows, so the
vector retriever never opens DuckDB. Whether a document needs embedding is decided against this table
itself (its `content_hash` per document), which makes the layer self-healing after a crash.

A table records the format it was written in, FORMAT_VERSION, in its schema metadata. A table of
another format (or with other columns, such as a metadata column added to the filters module's
COLUMNS) is absent to readers: search falls back to keywords, `document_state()` is empty, so the
embeddings layer re-embeds every document, and its first write drops and recreates the table.
Bump FORMAT_VERSION when what goes into the columns changes (chunking, a column's meaning).
"""

import logging
import re
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gitlab_knowledge.documents.columns import COLUMNS, ColumnType, column_value
from gitlab_knowledge.embeddings.lance_import import import_lancedb
from gitlab_knowledge.errors import EmbeddingUnavailable, StoreError

lancedb = import_lancedb()
log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FORMAT_KEY = b"gitlab_knowledge.format"
FAILURES_TABLE = "embedding_failures"
DELETE_BATCH = 500
METADATA_COLUMNS = (*(c.name for c in COLUMNS), "meta_hash")
ARROW_TYPES = {ColumnType.TEXT: pa.string(), ColumnType.TEXT_LIST: pa.list_(pa.string()), ColumnType.INT: pa.int64(),
               ColumnType.TIMESTAMP: pa.timestamp("us"), ColumnType.BOOL: pa.bool_()}


def table_name(provider: str, model: str) -> str:
    return "vectors__" + re.sub(r"[^a-z0-9]+", "_", f"{provider}__{model}".lower()).strip("_")


def vector_schema(dims: int) -> pa.Schema:
    return pa.schema([
        ("doc_id", pa.string()), ("chunk", pa.int32()), ("vector", pa.list_(pa.float32(), dims)),
        ("excerpt", pa.string()), ("content_hash", pa.string()), ("meta_hash", pa.string()),
        ("provider", pa.string()), ("model", pa.string()), ("dims", pa.int32()), ("embedded_at", pa.timestamp("us")),
        *((c.name, ARROW_TYPES[c.type]) for c in COLUMNS),
    ], metadata={FORMAT_KEY: str(FORMAT_VERSION).encode()})


def is_current(schema: pa.Schema) -> bool:
    """Whether a table of this schema was written in this code's format. A table with no format
    key was written before tables recorded one, in format 1's layout: it is format 1 (re-embedding
    a whole table costs hours), and the column check below still catches any other layout."""
    if (schema.metadata or {}).get(FORMAT_KEY, b"1") != str(FORMAT_VERSION).encode():
        return False
    index = schema.get_field_index("vector")
    if index < 0 or not pa.types.is_fixed_size_list(schema.field(index).type):
        return False
    return bool(schema.equals(vector_schema(schema.field(index).type.list_size), check_metadata=False))


FAILURE_SCHEMA = pa.schema([
    ("table_name", pa.string()), ("doc_id", pa.string()), ("project", pa.string()), ("content_hash", pa.string()),
    ("error", pa.string()), ("attempts", pa.int32()), ("failed_at", pa.timestamp("us")),
])


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({', '.join(sql_str(v) for v in values)})"


class VectorStore:
    """The vector table of one provider/model under `lancedb_dir`."""

    def __init__(self, lancedb_dir: Path, provider: str, model: str) -> None:
        self.dir = lancedb_dir
        self.provider = provider
        self.model = model
        self.name = table_name(provider, model)
        self._reader: Any = None
        self._reader_at = 0.0
        try:
            self._db = lancedb.connect(str(lancedb_dir))
        except Exception as exc:  # noqa: BLE001 - lancedb raises plain OSError/ValueError/RuntimeError
            raise StoreError(f"cannot open the vector store {lancedb_dir}: {exc}") from None

    # -- tables -----------------------------------------------------------------------------

    def _names(self) -> set[str]:
        return set(self._db.list_tables(limit=1000).tables)

    def _open(self) -> Any | None:
        """The table whatever its format, or None."""
        return self._db.open_table(self.name) if self.name in self._names() else None

    def exists(self) -> bool:
        """Whether there is a table of this code's format to search."""
        return self.table() is not None

    def table(self) -> Any | None:
        """The table, or None when there is none or it was written in another format."""
        table = self._open()
        return table if table is not None and is_current(table.schema) else None

    def dims(self) -> int | None:
        """The vector size of the table, None when there is no table of this code's format."""
        table = self.table()
        return table.schema.field("vector").type.list_size if table is not None else None

    def check_query(self, vector: Any) -> None:
        """EmbeddingUnavailable when a query vector cannot be compared with this table's vectors
        (the model behind the name now gives another size): search then answers by keyword."""
        table = self.reader()
        have = table.schema.field("vector").type.list_size if table is not None else None
        if have is not None and len(vector) != have:
            raise EmbeddingUnavailable(f"{self.provider}/{self.model} now gives {len(vector)}-dimensional vectors but "
                                       f"the table {self.name} holds {have}-dimensional ones (a new model under the old name: remove "
                                       f"{self.dir / (self.name + '.lance')} and run `embed` to rebuild it)")

    def reader(self, max_age: float = 1.0) -> Any | None:
        """A read handle reused for up to `max_age` seconds: reopening costs ~2.5 ms, which a
        search that runs every few milliseconds should not pay twice per query."""
        now = time.monotonic()
        if self._reader is None or now - self._reader_at > max_age:
            self._reader, self._reader_at = self.table(), now
        return self._reader

    def _table_for_write(self, dims: int) -> Any:
        table = self._open()
        if table is not None and not is_current(table.schema):
            # Its documents read as not embedded (document_state() saw no table): the caller is
            # re-embedding every one of them, so the old rows have nothing left to give.
            log.warning("vector table %s was written in another format: rebuilding it", self.name)
            self._db.drop_table(self.name)
            self._reader, table = None, None
        if table is not None:
            have = table.schema.field("vector").type.list_size
            if have != dims:
                raise StoreError(f"vector table {self.name} holds {have}-dim vectors but the model gives {dims}")
            return table
        return self._db.create_table(self.name, schema=vector_schema(dims))

    def _failures(self) -> Any:
        if FAILURES_TABLE in self._names():
            return self._db.open_table(FAILURES_TABLE)
        return self._db.create_table(FAILURES_TABLE, schema=FAILURE_SCHEMA)

    # -- reads ------------------------------------------------------------------------------

    def _scan(self, table: Any, where: str | None, columns: Sequence[str]) -> pa.Table:
        query = table.search().select(list(columns)).limit(None)
        if where:
            query = query.where(where)
        return query.to_arrow()

    def document_state(self, project: str | None = None) -> dict[str, tuple[str, str]]:
        """doc_id → (content_hash, meta_hash) of every embedded document (of one project)."""
        table = self.table()
        if table is None:
            return {}
        where = "chunk = 0" + (f" AND project = {sql_str(project)}" if project else "")
        rows = self._scan(table, where, ["doc_id", "content_hash", "meta_hash"]).to_pylist()
        return {r["doc_id"]: (r["content_hash"], r["meta_hash"]) for r in rows}

    def document_states(self, projects: Sequence[str]) -> dict[str, dict[str, tuple[str, str]]]:
        """`document_state` of each of `projects` from one scan (a scan per project was a fixed cost
        a batch of many projects paid once per project)."""
        out: dict[str, dict[str, tuple[str, str]]] = {p: {} for p in projects}
        table = self.table()
        if table is None or not projects:
            return out
        rows = self._scan(table, "chunk = 0 AND " + sql_in("project", projects),
                          ["project", "doc_id", "content_hash", "meta_hash"]).to_pylist()
        for r in rows:
            out.setdefault(r["project"], {})[r["doc_id"]] = (r["content_hash"], r["meta_hash"])
        return out

    def count(self, project: str | None = None) -> tuple[int, int]:
        """(documents, chunks)."""
        table = self.table()
        if table is None:
            return 0, 0
        where = f"project = {sql_str(project)}" if project else None
        chunks = table.count_rows(where) if where else table.count_rows()
        docs = table.count_rows(("chunk = 0 AND " + where) if where else "chunk = 0")
        return docs, chunks

    def rows_for(self, doc_ids: Sequence[str]) -> pa.Table:
        table = self.table()
        if table is None or not doc_ids:
            return vector_schema(1).empty_table()
        parts = [self._scan(table, sql_in("doc_id", doc_ids[i:i + DELETE_BATCH]), table.schema.names)
                 for i in range(0, len(doc_ids), DELETE_BATCH)]
        return pa.concat_tables(parts)

    def excerpts(self, chunks: dict[str, int]) -> dict[str, str]:
        """The text of one chunk per document ({doc_id: chunk index})."""
        table = self.reader()
        if table is None or not chunks:
            return {}
        rows = self._scan(table, sql_in("doc_id", sorted(chunks)), ["doc_id", "chunk", "excerpt"]).to_pylist()
        return {r["doc_id"]: r["excerpt"] or "" for r in rows if chunks.get(r["doc_id"]) == r["chunk"]}

    def failures(self, project: str | None = None) -> dict[str, dict[str, Any]]:
        if project:
            return self.failures_of([project])[project]
        if FAILURES_TABLE not in self._names():
            return {}
        where = f"table_name = {sql_str(self.name)}"
        rows = self._scan(self._db.open_table(FAILURES_TABLE), where, FAILURE_SCHEMA.names).to_pylist()
        return {r["doc_id"]: r for r in rows}

    def failures_of(self, projects: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """`failures` of each of `projects` from one scan (a check of a batch of many projects
        read them once per project)."""
        out: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in projects}
        if not projects or FAILURES_TABLE not in self._names():
            return out
        where = f"table_name = {sql_str(self.name)} AND " + sql_in("project", projects)
        for r in self._scan(self._db.open_table(FAILURES_TABLE), where, FAILURE_SCHEMA.names).to_pylist():
            out.setdefault(r["project"], {})[r["doc_id"]] = r
        return out

    # -- writes -----------------------------------------------------------------------------

    def delete_docs(self, doc_ids: Sequence[str]) -> None:
        table = self.table()
        if table is None:
            return
        for i in range(0, len(doc_ids), DELETE_BATCH):
            table.delete(sql_in("doc_id", doc_ids[i:i + DELETE_BATCH]))

    def replace_docs(self, rows: list[dict[str, Any]], dims: int) -> None:
        """Write these chunk rows, replacing whatever the same documents had before. The rows are
        checked before the old ones are deleted: a bad vector must not cost the stored ones."""
        if not rows:
            return
        data = checked_rows(rows, dims, self.name)
        table = self._table_for_write(dims)
        self.delete_docs(sorted({r["doc_id"] for r in rows}))
        table.add(data)
        if not table.list_indices():
            # Deletes and display lookups go by doc_id: a B-tree keeps them off full scans.
            # optimize() folds later rows into it.
            from lancedb.index import BTree

            table.create_index("doc_id", config=BTree())

    def update_metadata(self, metadata: dict[str, dict[str, Any]]) -> int:
        """Rewrite the filterable metadata of documents whose text (and vectors) did not change."""
        table = self.table()
        if table is None or not metadata:
            return 0
        current = self.rows_for(sorted(metadata)).to_pylist()
        for row in current:
            row.update(metadata[row["doc_id"]])
        dims = table.schema.field("vector").type.list_size
        self.replace_docs(current, dims)
        return len({r["doc_id"] for r in current})

    def record_failures(self, failures: list[dict[str, Any]]) -> None:
        if not failures:
            return
        table = self._failures()
        self.clear_failures([f["doc_id"] for f in failures])
        table.add(pa.Table.from_pylist([{**f, "table_name": self.name} for f in failures], schema=FAILURE_SCHEMA))

    def clear_failures(self, doc_ids: Sequence[str]) -> None:
        if not doc_ids or FAILURES_TABLE not in self._names():
            return
        table = self._db.open_table(FAILURES_TABLE)
        for i in range(0, len(doc_ids), DELETE_BATCH):
            table.delete(f"table_name = {sql_str(self.name)} AND " + sql_in("doc_id", doc_ids[i:i + DELETE_BATCH]))

    def optimize(self) -> None:
        """Compact fragments, fold new rows into the indexes, and drop versions superseded more
        than 10 minutes ago (run inside the LanceDB pool). Every sync rewrites changed rows, so
        with LanceDB's default of 7 days the old versions outgrow the table; a reader opens the
        latest version and finishes within seconds, so 10 minutes leaves it plenty."""
        table = self.table()
        if table is not None:
            table.optimize(cleanup_older_than=timedelta(minutes=10))


def checked_rows(rows: list[dict[str, Any]], dims: int, table: str) -> pa.Table:
    """The rows as an Arrow table of the vector schema, or StoreError when a vector has another
    size or holds NaN/infinity (LanceDB would refuse them only after the old rows were deleted)."""
    try:
        data = pa.Table.from_pylist(rows, schema=vector_schema(dims))
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError) as exc:
        raise StoreError(f"refused to write vectors to {table}: {str(exc).splitlines()[0]}") from None
    values = pc.list_flatten(data.column("vector"))
    if len(values) != data.num_rows * dims or not pc.all(pc.is_finite(values)).as_py():
        raise StoreError(f"refused to write vectors to {table}: a vector is not {dims} finite numbers")
    return data


def chunk_rows(doc: dict[str, Any], chunks: Sequence[Any], provider: str, model: str, now: datetime) -> list[dict[str, Any]]:
    """LanceDB rows for one document's embedded chunks."""
    dims = len(chunks[0].vector) if chunks else 0
    return [{
        "doc_id": doc["id"], "chunk": i, "vector": chunk.vector.tolist(), "excerpt": chunk.text,
        "content_hash": doc["content_hash"], "meta_hash": doc["meta_hash"], "provider": provider, "model": model,
        "dims": dims, "embedded_at": now, **metadata_of(doc),
    } for i, chunk in enumerate(chunks)]


def metadata_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A documents-table row's filterable metadata, in vector-table column names."""
    return {**{c.name: column_value(c, doc) for c in COLUMNS}, "meta_hash": doc["meta_hash"]}
