"""The filter and column registries hold what they promise.

`Filters` and `DocFields` are checked against the registries they are written from, the MCP
search tool's arguments and search/schema.json's `filters` against the filter registry, and a new
filter on a new document column, declared in the registries alone (plus what its migration does,
simulated), is shown reaching every place that builds, stores, filters on or carries document
columns (documents/columns.py lists the three files it touches).
"""

import asyncio
import dataclasses
import functools
import importlib
import json
import typing
from datetime import date, datetime
from pathlib import Path
from types import SimpleNamespace

import duckdb
import jsonschema
import numpy as np
import pytest
import tantivy

from gitlab_knowledge import kinds
from gitlab_knowledge.documents import build, columns, refresh, stage
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
from gitlab_knowledge.mcp import tools
from gitlab_knowledge.mcp.bounds import SEARCH_LIMIT
from gitlab_knowledge.mcp.context import Context
from gitlab_knowledge.search import filter_schemas, filters, lexical_retriever, semantic
from gitlab_knowledge.search.arguments import build_parser
from gitlab_knowledge.search.filters import FILTERS, Filters, FilterSpec, Match
from gitlab_knowledge.store.bulk import forget_table_schemas
from gitlab_knowledge.store.migrations import migrate

REPO = Path(__file__).resolve().parents[2]

# What a filter's value is once validated, by how it matches.
VALUE_TYPES = {Match.ANY_OF: tuple[str, ...], Match.ALL_OF: tuple[str, ...], Match.EXACT: str | None,
               Match.GRAPH: str | None, Match.ON_OR_AFTER: date | None, Match.BEFORE: date | None,
               Match.EXCLUDE_TRUE: bool}

# The new column's value is the issue's `severity` (a column of its normalized table, as if there).
SEVERITY = Column("severity", "severity", ColumnType.TEXT, take=lambda source: source.parent.get("severity"))
BY_SEVERITY = FilterSpec("severity", "--severity", Match.EXACT, "severity", metavar="LEVEL", describe="severity",
                         summary="Only documents of this severity.")

# The MCP search tool's input schema as it was written by hand before it derived from FILTERS
# (with the type spellings it accepts since the kind vocabulary became one).
HAND_WRITTEN_SEARCH_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {
        "query": {"type": "string", "minLength": 1, "description": "What to look for: words, a question, an "
                  "identifier, a path, or a reference such as #234, !847 or group/project#12."},
        "type": {"type": "array", "items": {"enum": list(kinds.SOURCE_TYPE_WORDS)},
                 "description": "Only these document types: issue, merge_request (or mr), discussion, wiki_page (or wiki), release."},
        "author": {"type": "string", "description": "Only documents by this username."},
        "label": {"type": "array", "items": {"type": "string"},
                  "description": "Every label must match (one label each; GitLab's label names hold no comma)."},
        "after": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "Created on or after (YYYY-MM-DD)."},
        "before": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "Created before (YYYY-MM-DD)."},
        "project": {"type": "string", "description": "Only this project (group/project)."},
        "state": {"type": "string", "enum": ["opened", "closed", "merged", "locked", "reopened", "all"],
                  "description": "opened, closed, merged, locked, reopened (the item's, for a thread too), or all."},
        "path": {"type": "string", "description": "Only MRs that changed this file, or a file under this directory, "
                 "and review threads positioned on it (e.g. services/auth or services/auth/jwt.py)."},
        "participant": {"type": "string", "description": "Only threads this username wrote a note in, and "
                        "issues/MRs they authored, are assigned or review."},
        "mode": {"enum": ["hybrid", "lexical", "semantic"], "default": "hybrid",
                 "description": "hybrid (default) fuses keywords and meaning; lexical is keywords only."},
        "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT, "default": 10},
    },
}
EVERY_FILTER = {"types": ["mr", "issue"], "author": "@janedoe", "labels": ["a", "b"], "after": "2024-01-01",
                "before": "2024-06-01", "project": "g/p", "state": "merged", "path": "services/auth",
                "participant": "@JaneDoe", "exclude_confidential": True, "exclude_internal": True}


def test_filters_is_the_filter_registry_written_out():
    fields = dataclasses.fields(Filters)
    hints = typing.get_type_hints(Filters)
    assert [f.name for f in fields] == [s.name for s in FILTERS] + ["doc_ids", "complement", "scope"]
    for spec, f in zip(FILTERS, fields, strict=False):
        assert f.default == spec.empty, spec.name
        assert hints[spec.name] == VALUE_TYPES[spec.match], spec.name
    assert set(VALUE_TYPES) == {s.match for s in FILTERS}


def test_doc_fields_are_the_column_registry():
    hints = typing.get_type_hints(DocFields)
    assert [f.name for f in dataclasses.fields(DocFields)] == [DOC_ID, *(c.name for c in COLUMNS)]
    assert all(hints[c.name] == PYTHON_TYPES[c.type] for c in COLUMNS)


def test_the_mcp_search_arguments_are_the_filter_registry():
    assert tools.SEARCH_INPUT == HAND_WRITTEN_SEARCH_INPUT
    # Published as it was, key order included.
    assert json.dumps(tools.SEARCH_INPUT) == json.dumps(HAND_WRITTEN_SEARCH_INPUT)
    arguments = {"type": ["discussion"], "author": "@janedoe", "label": ["a"], "after": "2024-01-01",
                 "project": "g/p", "path": "services/auth", "query": "q", "limit": 3}
    assert filter_schemas.keywords(arguments) == {
        "types": ["discussion"], "author": "@janedoe", "labels": ["a"], "after": "2024-01-01", "before": None,
        "project": "g/p", "state": None, "path": "services/auth", "participant": None}


def test_the_published_filters_are_the_filter_registry():
    committed = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())
    assert committed["properties"]["filters"] == filter_schemas.reported(), (
        "search/schema.json's filters differ from FILTERS: run scripts/write_filter_schema.py")
    validator = jsonschema.Draft202012Validator(filter_schemas.reported(), format_checker=jsonschema.FormatChecker())
    for described in (Filters().describe(), Filters.build(**EVERY_FILTER).describe()):
        validator.validate(json.loads(json.dumps(described)))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**Filters().describe(), "after": "2024-13-01"})


def _issue(iid: int, severity: str) -> dict[str, object]:
    """An issue row as the document builder reads it, with the new column."""
    day = datetime(2024, 5, iid)
    return {"id": 100 + iid, "iid": iid, "project_id": 1, "title": "Disk full", "description": "The disk is full.",
            "labels": ["ops"], "state": "opened", "author_username": "a", "confidential": False,
            "created_at": day, "updated_at": day, "web_url": f"https://g/g/p/-/issues/{iid}", "severity": severity}


def _stored(con: duckdb.DuckDBPyConnection, docs: list[build.Document], path: Path) -> list[dict[str, object]]:
    """The documents inserted as the documents layer does, then staged as both index layers read them."""
    forget_table_schemas()
    try:
        refresh._write(con, docs, [], None)
    finally:
        forget_table_schemas()
    staging = importlib.reload(stage)
    staging.stage_documents(con, [d.id for d in docs], path)
    return [row for batch in staging.iter_documents(path, 10) for row in batch]


def test_a_new_filter_on_a_new_column_needs_only_its_declarations(tmp_path, monkeypatch):
    # The declarations: a Column (documents/columns.py), a FilterSpec and its `Filters` field
    # (search/filters.py); the migration (store/migrations.py) is simulated below. Modules read the
    # registries at import; here they are patched in place.
    extended = (*COLUMNS, SEVERITY)
    record = record_type(extended)
    for module in (columns, build, lexical_index, vectors):
        monkeypatch.setattr(module, "COLUMNS", extended)
    monkeypatch.setattr(lexical_index, "DocFields", record)
    monkeypatch.setattr(lexical_retriever, "COLUMN", {c.name: c for c in extended})
    for module in (filters, semantic, filter_schemas):
        monkeypatch.setattr(module, "FILTERS", (*FILTERS, BY_SEVERITY))
    with_severity = dataclasses.make_dataclass(
        "Filters", [("severity", str | None, dataclasses.field(default=None))], bases=(Filters,), frozen=True)
    monkeypatch.setattr(filters, "Filters", with_severity)

    # The command's flag, validation, the JSON `filters` and what reaches the retrievers.
    built = with_severity.from_args(build_parser().parse_args(["disk", "--severity", "high"]))
    assert built.severity == "high" and built.describe()["severity"] == "high"
    assert [(spec.column, value) for spec, value in built.pushed()] == [("severity", "high")]

    # The JSON output's schema (search/schema.json's `filters`, regenerated from the registry).
    reported = filter_schemas.reported()
    assert reported["properties"]["severity"] == {"type": ["string", "null"]} and "severity" in reported["required"]
    jsonschema.validate(json.loads(json.dumps(built.describe())), reported)

    # The MCP search tool: its argument, and the handler handing it to the searcher.
    assert tools.search_input()["properties"]["severity"] == {"type": "string",
                                                              "description": "Only documents of this severity."}

    class Searched(Exception):
        pass

    def searched(query, given, mode, limit, reads):
        raise Searched(given)

    ctx = SimpleNamespace(include_confidential=True, include_internal=True, resident=SimpleNamespace(search=searched),
                          search_reads=lambda: None)
    ctx.filters = functools.partial(Context.filters, ctx)  # the server's own: the opt-outs, a viewer's scope
    with pytest.raises(Searched) as handed:
        asyncio.run(tools.search(ctx, {"query": "disk", "severity": "high"}))
    assert handed.value.args[0] == built

    # LanceDB's where-clause and the in-memory mask.
    assert semantic.where_clause(built) == "severity = 'high'"
    assert "severity" in semantic._filtered_columns(Match.EXACT, Match.ANY_OF)
    memory = semantic.MemoryVectors.__new__(semantic.MemoryVectors)
    memory.doc_ids = np.array(["a", "b", "c"], dtype=object)
    memory.codes = {"severity": (np.array([0, 1, -1]), {"high": 0, "low": 1})}
    assert memory.mask(built).tolist() == [True, False, False]

    # The documents: the builder takes the value into the metadata (and its hash), for an issue's
    # own document and its threads alike.
    high, low = (build.parent_document("issue", _issue(i, level), "g/p", None, None)
                 for i, level in ((1, "high"), (2, "low")))
    assert high.metadata()["severity"] == "high" and high.columns()["severity"] == "high"
    assert high.meta_hash != build.parent_document("issue", _issue(1, "low"), "g/p", None, None).meta_hash
    note = {"id": 5, "author_username": "b", "body": "Still full.", "created_at": datetime(2024, 5, 3)}
    thread = build.thread_document("issue", _issue(1, "high"), {"id": "t1"}, [note], "g/p", None, None)
    assert thread.metadata()["severity"] == "high"

    # The documents insert, into a store whose migration added the column, and the columns staged
    # out of DuckDB for both index layers.
    con = duckdb.connect()
    migrate(con)
    con.execute("ALTER TABLE documents ADD COLUMN severity TEXT")  # what the migration would do
    try:
        rows = _stored(con, [high, low], tmp_path / "staged.parquet")
        assert "severity" in stage.DOC_COLUMNS.split(", ")
    finally:
        monkeypatch.setattr(columns, "COLUMNS", COLUMNS)
        importlib.reload(stage)
    assert [(r["id"], r["severity"]) for r in rows] == [("issue:101", "high"), ("issue:102", "low")]
    assert con.execute("SELECT severity, meta_hash FROM documents ORDER BY id").fetchall() == [
        ("high", high.meta_hash), ("low", low.meta_hash)]

    # The vector table's columns and the values it stores.
    assert vectors.vector_schema(4).field("severity").type == vectors.ARROW_TYPES[ColumnType.TEXT]
    assert vectors.metadata_of(rows[0])["severity"] == "high"

    # The lexical index's field, what it stores, and its Tantivy clause, end to end.
    assert ("severity", "text") in lexical_index.schema_fields()
    index = lexical_index.LexicalIndex(tmp_path / "tantivy", create=True)
    with index.writer() as writer:
        for row in rows:
            writer.add_document(index.document(row))
        writer.commit()
    must = [(tantivy.Occur.Must, q) for q in lexical_retriever.filter_queries(index, built)]
    found = [doc for _score, doc in index.find(tantivy.Query.boolean_query(must), 10)]
    assert [(d.doc_id, d.severity) for d in found] == [("issue:101", "high")]
    assert found[0].created_at == datetime(2024, 5, 1)
