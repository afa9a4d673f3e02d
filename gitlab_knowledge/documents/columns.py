"""The document metadata both indexes carry, declared once (COLUMNS).

Every document carries these columns from the DuckDB `documents` table into the vector table
(embeddings/vectors.py `vector_schema`, `metadata_of`) and the lexical index (lexical/index.py
`build_schema`, `document`, `stored_fields`); documents/stage.py copies them out of DuckDB, and
both retrievers hand them on as one `DocFields` record (COLUMNS written out, held to them by a test). The document
builder takes each column's value (documents/build.py `Document.columns`, by `Column.take` when
the Document has no field of that name), hashes them (`metadata()`, `meta_hash`) and
documents/refresh.py inserts them, all by walking COLUMNS. Search filters on them and shows them:
search/filters.py declares the filters, each reading one column.

A new filter on a new column is written in three files (test_search_registry exercises the rest):

1. this file: a `Column` in COLUMNS, with `take` reading its value from what the document builder
   has (`Source`: the issue/MR row, every column of its table, and a thread's notes). A new column
   changes the document's metadata, so `meta_hash` changes and both indexes rewrite the documents
   whose value changed; it changes the vector and lexical layouts too: both notice it and rebuild
   themselves on the next sync;
2. search/filters.py: its `FilterSpec` in FILTERS and the matching `Filters` field (the CLI flag,
   both retrievers' clauses, the MCP search tool's argument and the JSON output's key derive from
   the spec);
3. store/migrations.py: a migration adding the column to `documents` (and resetting the documents
   watermark in `layer_state`, so that existing documents are rebuilt with it).

A filter reported in the JSON output (`describe`) also changes a fourth file without writing it:
search/schema.json, whose `filters` `scripts/write_filter_schema.py` regenerates from FILTERS (the
published contract lists every key; test_search_registry fails until it is regenerated).

A value the issue/MR row does not hold yet is first a column of a normalized table: a change of the
normalized layer, before this one (its recipe is in store/migrations.py).
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, make_dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class ColumnType(StrEnum):
    TEXT = "text"
    TEXT_LIST = "text_list"
    INT = "int"
    TIMESTAMP = "timestamp"
    BOOL = "bool"


@dataclass(frozen=True)
class Source:
    """What the document builder has when it takes a column's value: the issue or MR row (every
    column of its table) and, for a thread's document, the thread's notes in order."""

    kind: str  # the parent's kind: issue | merge_request
    parent: Mapping[str, Any]
    notes: Sequence[Mapping[str, Any]] = ()  # empty for the or MR's own document


@dataclass(frozen=True)
class Column:
    name: str  # in the vector table, the lexical index and a result's fields
    source: str  # the `documents` column it is copied from
    type: ColumnType
    lexical_field: str | None = None  # the Tantivy field, when `name` is taken by a scoring field
    # How the document builder takes the value; None: the Document's field named `source` (the
    # columns the builder computes itself, e.g. a thread's author is its first note's).
    take: Callable[[Source], Any] | None = None

    @property
    def field(self) -> str:
        return self.lexical_field or self.name


# In the vector table's column order: a reordering would change its layout and rebuild it.
COLUMNS: tuple[Column, ...] = (
    Column("source_type", "source_type", ColumnType.TEXT),
    Column("project", "project_path", ColumnType.TEXT),
    Column("parent_type", "parent_type", ColumnType.TEXT),
    Column("iid", "parent_iid", ColumnType.INT),
    Column("title", "title", ColumnType.TEXT, lexical_field="parent_title"),
    Column("url", "url", ColumnType.TEXT),
    Column("author", "author_username", ColumnType.TEXT),
    Column("labels", "labels", ColumnType.TEXT_LIST),
    Column("state", "state", ColumnType.TEXT),
    Column("created_at", "created_at", ColumnType.TIMESTAMP),
    Column("updated_at", "updated_at", ColumnType.TIMESTAMP),
    Column("confidential", "confidential", ColumnType.BOOL),
    Column("internal", "internal", ColumnType.BOOL),
)
COLUMN = {c.name: c for c in COLUMNS}
DOC_ID = "doc_id"  # the document id in both indexes (not a metadata column: each index's own)


def column_value(column: Column, doc: dict[str, Any]) -> Any:
    """A documents-table row's value of `column`, as the indexes store it."""
    value = doc[column.source]
    if column.type is ColumnType.TEXT_LIST:
        return list(value or [])
    if column.type is ColumnType.BOOL:
        return bool(value)
    return value


# The Python type of each kind of column, as both indexes return it (a missing text is None).
PYTHON_TYPES: dict[ColumnType, Any] = {
    ColumnType.TEXT: str | None,
    ColumnType.TEXT_LIST: list[str],
    ColumnType.INT: int | None,
    ColumnType.TIMESTAMP: datetime | None,
    ColumnType.BOOL: bool,
}


class _ByName:
    """Read a column by its registry name as well (`fields["url"]`): how results were read when
    they were dicts, and how code that walks the registry reads them."""

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


def record_type(columns: tuple[Column, ...]) -> type:
    """A frozen dataclass of a document's id and `columns`, each typed by its ColumnType."""
    return make_dataclass("DocFields", [(DOC_ID, str), *((c.name, PYTHON_TYPES[c.type]) for c in columns)],
                          bases=(_ByName,), frozen=True,
                          namespace={"__doc__": "A document's id and metadata columns, as a search result carries them.",
                                     "__module__": __name__})


@dataclass(frozen=True)
class DocFields(_ByName):
    """A document's id and metadata columns, as a search result carries them: COLUMNS written out
    (`record_type(COLUMNS)` typed by hand, so that a type checker sees the fields;
    test_search_registry holds the two together)."""

    doc_id: str
    source_type: str | None
    project: str | None
    parent_type: str | None
    iid: int | None
    title: str | None
    url: str | None
    author: str | None
    labels: list[str]
    state: str | None
    created_at: datetime | None
    updated_at: datetime | None
    confidential: bool
    internal: bool
