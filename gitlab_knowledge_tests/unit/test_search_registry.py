"""The filter and column registries hold what they promise.

`Filters` and `DocFields` are checked against the registries they are written from, and a new
filter on a new document column, declared in the registries alone, is shown reaching every place
that filters on or carries document columns (documents/columns.py lists the files it touches).
"""

import dataclasses
import importlib
import typing
from datetime import date, datetime

import numpy as np
import tantivy

from gitlab_knowledge.documents import columns, stage
from gitlab_knowledge.documents.columns import (
    COLUMNS,
    DOC_ID,
    PYTHON_TYPES,
    Column,
    ColumnType,
    DocFields,
    record_type,
)
from gitlab_knowledge.embeddings import vectors
from gitlab_knowledge.lexical import index as lexical_index
from gitlab_knowledge.search import filters, lexical_retriever, semantic
from gitlab_knowledge.search.arguments import build_parser
from gitlab_knowledge.search.filters import FILTERS, Filters, FilterSpec, Match

# What a filter's value is once validated, by how it matches.
VALUE_TYPES = {Match.ANY_OF: tuple[str, ...], Match.ALL_OF: tuple[str, ...], Match.EXACT: str | None,
               Match.GRAPH: str | None, Match.ON_OR_AFTER: date | None, Match.BEFORE: date | None,
               Match.EXCLUDE_TRUE: bool}

SEVERITY = Column("severity", "severity", ColumnType.TEXT)
BY_SEVERITY = FilterSpec("severity", "--severity", Match.EXACT, "severity", metavar="LEVEL", describe="severity")


def test_filters_is_the_filter_registry_written_out():
    fields = dataclasses.fields(Filters)
    hints = typing.get_type_hints(Filters)
    assert [f.name for f in fields] == [s.name for s in FILTERS] + ["doc_ids", "complement"]
    for spec, f in zip(FILTERS, fields, strict=False):
        assert f.default == spec.empty, spec.name
        assert hints[spec.name] == VALUE_TYPES[spec.match], spec.name
    assert set(VALUE_TYPES) == {s.match for s in FILTERS}


def test_doc_fields_are_the_column_registry():
    hints = typing.get_type_hints(DocFields)
    assert [f.name for f in dataclasses.fields(DocFields)] == [DOC_ID, *(c.name for c in COLUMNS)]
    assert all(hints[c.name] == PYTHON_TYPES[c.type] for c in COLUMNS)


def _row(severity: str) -> dict[str, object]:
    """A documents-table row as the index layers read it, with the new column."""
    day = datetime(2024, 5, 1)
    return {"id": f"issue:{severity}", "source_type": "issue", "project_path": "g/p", "parent_type": "issue",
            "parent_iid": 1, "title": "Disk full", "url": "https://g/g/p/-/issues/1", "author_username": "a",
            "labels": ["ops"], "state": "opened", "created_at": day, "updated_at": day, "confidential": False,
            "internal": False, "severity": severity, "content_text": "disk full", "content_hash": "c",
            "meta_hash": "m"}


def test_a_new_filter_on_a_new_column_needs_only_its_declarations(tmp_path, monkeypatch):
    # The declarations: a Column (documents/columns.py), a FilterSpec and its `Filters` field
    # (search/filters.py). Modules read the registries at import; here they are patched in place.
    extended = (*COLUMNS, SEVERITY)
    record = record_type(extended)
    for module in (columns, lexical_index, vectors):
        monkeypatch.setattr(module, "COLUMNS", extended)
    monkeypatch.setattr(lexical_index, "DocFields", record)
    monkeypatch.setattr(lexical_retriever, "COLUMN", {c.name: c for c in extended})
    for module in (filters, semantic):
        monkeypatch.setattr(module, "FILTERS", (*FILTERS, BY_SEVERITY))
    with_severity = dataclasses.make_dataclass(
        "Filters", [("severity", str | None, dataclasses.field(default=None))], bases=(Filters,), frozen=True)

    # The command's flag, validation, the JSON `filters` and what reaches the retrievers.
    built = with_severity.from_args(build_parser().parse_args(["disk", "--severity", "high"]))
    assert built.severity == "high" and built.describe()["severity"] == "high"
    assert [(spec.column, value) for spec, value in built.pushed()] == [("severity", "high")]

    # LanceDB's where-clause and the in-memory mask.
    assert semantic.where_clause(built) == "severity = 'high'"
    assert "severity" in semantic._filtered_columns(Match.EXACT, Match.ANY_OF)
    memory = semantic.MemoryVectors.__new__(semantic.MemoryVectors)
    memory.doc_ids = np.array(["a", "b", "c"], dtype=object)
    memory.codes = {"severity": (np.array([0, 1, -1]), {"high": 0, "low": 1})}
    assert memory.mask(built).tolist() == [True, False, False]

    # The vector table's columns and the values it stores.
    assert vectors.vector_schema(4).field("severity").type == vectors.ARROW_TYPES[ColumnType.TEXT]
    assert vectors.metadata_of(_row("high"))["severity"] == "high"

    # The lexical index's field, what it stores, and its Tantivy clause, end to end.
    assert ("severity", "text") in lexical_index.schema_fields()
    index = lexical_index.LexicalIndex(tmp_path / "tantivy", create=True)
    with index.writer() as writer:
        for level in ("high", "low"):
            writer.add_document(index.document(_row(level)))
        writer.commit()
    must = [(tantivy.Occur.Must, q) for q in lexical_retriever.filter_queries(index, built)]
    found = [doc for _score, doc in index.find(tantivy.Query.boolean_query(must), 10)]
    assert [(d.doc_id, d.severity) for d in found] == [("issue:high", "high")]
    assert found[0].created_at == datetime(2024, 5, 1)

    # The columns staged out of DuckDB for both index layers.
    try:
        assert "severity" in importlib.reload(stage).DOC_COLUMNS.split(", ")
    finally:
        monkeypatch.setattr(columns, "COLUMNS", COLUMNS)
        importlib.reload(stage)
