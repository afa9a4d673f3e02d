"""`list`, `count` and `show` of the kinds keyed by a string (kinds.KEYED_KINDS: a wiki page by
its slug). Each reads through `workspace.read()`, so a lens that hides a project hides its pages:
their rows carry the project's id like every item's.
"""

from typing import TYPE_CHECKING, Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import AmbiguousReference, UsageError
from gitlab_knowledge.store.queries import check_project

if TYPE_CHECKING:
    from gitlab_knowledge.workspace import Workspace


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def list_keyed(workspace: "Workspace", kind: kinds.KeyedKind, project: str | None, limit: int) -> list[dict[str, Any]]:
    """A project's (or every project's) pages by project and key, at most `limit`."""
    with workspace.read() as con:
        project_id = check_project(con, project)
        where, params = (" AND t.project_id = ?", [project_id]) if project_id is not None else ("", [])
        return _rows(con, f"""
            SELECT p.path_with_namespace AS project, t.{kind.key_column} AS key, t.title, t.format,
                   length(t.{kind.text_column}) AS length, t.web_url
            FROM {kind.table} t JOIN projects p ON p.id = t.project_id
            WHERE true{where} ORDER BY p.path_with_namespace, t.{kind.key_column} LIMIT ?
        """, [*params, limit])


def count_keyed(con: duckdb.DuckDBPyConnection, kind: kinds.KeyedKind, project_id: int | None) -> int:
    where, params = (" WHERE project_id = ?", [project_id]) if project_id is not None else ("", [])
    row = con.execute(f"SELECT count(*) FROM {kind.table}{where}", params).fetchall()
    return int(row[0][0])


def keyed_row(con: duckdb.DuckDBPyConnection, kind: kinds.KeyedKind, key: str, project: str | None) -> dict[str, Any]:
    """One page by key (and project: a slug like `home` is in every wiki); a one-line error when
    no stored page, or several, answer to it."""
    key = key.strip().removeprefix(f"{kind.prefix}:")
    project_id = check_project(con, project)
    where, params = (" AND t.project_id = ?", [project_id]) if project_id is not None else ("", [])
    found = _rows(con, f"""
        SELECT t.*, p.path_with_namespace AS project FROM {kind.table} t JOIN projects p ON p.id = t.project_id
        WHERE t.{kind.key_column} = ?{where} ORDER BY p.path_with_namespace
    """, [key, *params])
    label = f"{kind.noun} {kind.ref(key)}"
    if not found:
        raise UsageError(f"no {label} in the store" + (f" for {project}" if project else ""))
    if len(found) > 1:
        raise AmbiguousReference(label, [r["project"] for r in found])
    return found[0]


def show_keyed(workspace: "Workspace", kind: kinds.KeyedKind, key: str, project: str | None) -> dict[str, Any]:
    """A page with its text and the issues and MRs it links to (the graph layer's links)."""
    with workspace.read() as con:
        row = keyed_row(con, kind, key, project)
        row["reference"] = kind.ref(row[kind.key_column])
        row["links"] = _rows(con, """
            SELECT DISTINCT kind, target_type AS type, target_path AS project, target_iid AS iid, external
            FROM item_references WHERE source_type = ? AND source_id = ?
            ORDER BY target_type, target_path, target_iid
        """, [kind.name, row["id"]])
        for link in row["links"]:
            link["reference"] = kinds.kind(link["type"]).ref(link["iid"], link["project"])
        return row
