"""The document metadata both indexes carry, declared once (COLUMNS).

Every document carries these columns from the DuckDB `documents` table into the vector table
(embeddings/vectors.py `vector_schema`, `metadata_of`) and the lexical index (lexical/index.py
`build_schema`, `document`, `stored_fields`); documents/stage.py copies them out of DuckDB. Search
filters on them and shows them: search/filters.py declares the filters, each reading one column.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ColumnType(StrEnum):
    TEXT = "text"
    TEXT_LIST = "text_list"
    INT = "int"
    TIMESTAMP = "timestamp"
    BOOL = "bool"


@dataclass(frozen=True)
class Column:
    name: str  # in the vector table, the lexical index and a result's fields
    source: str  # the `documents` column it is copied from
    type: ColumnType
    lexical_field: str | None = None  # the Tantivy field, when `name` is taken by a scoring field

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
