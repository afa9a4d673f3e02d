"""Graph filters (`--path`, `--participant`): which documents match, read from the store per search;
and `--project`, checked against the store's projects the way `list` checks it.

A graph filter is a fact about relations the indexes do not carry: the files a merge request
changed (`mr_files`), the diff lines a thread is on (`note_positions`), who wrote a thread's notes.
Carrying them as metadata columns would change the vector table's layout, and a table of another
layout is re-embedded whole (embeddings/vectors.py). So each search asks DuckDB (a short read
connection) for the ids of the matching documents, and both retrievers get that set as one more
pushed-down filter (filters.Match.IN_SET): LanceDB a prefilter `doc_id IN (...)`, Tantivy a term
set on `doc_id`. The filter applies before each retriever's top-N cut, like every other filter.

Set size: LanceDB plans an `IN` list at ~12 µs an id whatever the table's size (measured: 10K ids
0.08-0.2 s, 50K 0.4-0.7 s, 100K 1.2-2 s), Tantivy's term set costs a few ms at 100K. A set larger
than half the documents is pushed as its complement (`NOT IN` the rest), so what is planned never
exceeds half the store.
"""

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gitlab_knowledge import kinds
from gitlab_knowledge.search.filters import Filters, FilterSpec
from gitlab_knowledge.store.db import one_row

if TYPE_CHECKING:  # a search without graph filters never opens DuckDB: no import for it either
    import duckdb

    from gitlab_knowledge.workspace import Workspace

# Set sizes below this are pushed as they are: the complement saves nothing worth a second query.
COMPLEMENT_FROM = 2_000

# An exact file path matches that file; a directory matches everything under it (`services/auth`
# matches services/auth/jwt.py, not services/authz.py). Old and new paths both count: a rename
# or a deletion changed the old path too.
_PATH_MATCH = "({c} = $path OR starts_with({c}, $dir))"
PATH_SQL = f"""
    SELECT d.id FROM documents d
    WHERE (d.source_type = '{kinds.MERGE_REQUEST.name}' AND d.parent_id IN (
              SELECT merge_request_id FROM mr_files
              WHERE {_PATH_MATCH.format(c="new_path")} OR {_PATH_MATCH.format(c="old_path")}))
       OR (d.source_type = '{kinds.DISCUSSION}' AND d.source_id IN (
              SELECT n.discussion_id FROM note_positions p JOIN notes n ON n.id = p.note_id
              WHERE {_PATH_MATCH.format(c="p.new_path")} OR {_PATH_MATCH.format(c="p.old_path")}))
"""

# GitLab usernames are unique regardless of case, and people type them either way.
_HAS_USER = "list_contains(list_transform({c}, lambda u: lower(u)), $user)"
_ITEM_PARTICIPANT = """
       OR (d.source_type = $kind_{i} AND d.parent_id IN (
              SELECT id FROM {table}
              WHERE lower(author_username) = $user OR {people}))"""
PARTICIPANT_SQL = f"""
    SELECT d.id FROM documents d
    WHERE (d.source_type = '{kinds.DISCUSSION}' AND d.source_id IN (
              SELECT discussion_id FROM notes WHERE lower(author_username) = $user))""" + "".join(
    _ITEM_PARTICIPANT.format(i=i, table=k.table, people="\n                 OR ".join(
        _HAS_USER.format(c=c) for c in k.people_columns))
    for i, k in enumerate(kinds.ITEM_KINDS)) + "\n"
_KIND_PARAMS = {f"kind_{i}": k.name for i, k in enumerate(kinds.ITEM_KINDS)}


def _participant_params(user: str) -> dict[str, Any]:
    return {"user": user.lower(), **_KIND_PARAMS}


def _path_params(path: str) -> dict[str, Any]:
    return {"path": path, "dir": path + "/"}


def _path_empty(con: "duckdb.DuckDBPyConnection", path: str) -> str:
    why = f"--path {path}: no merge request changed it and no thread is on its diff lines"
    if one_row(con.execute("SELECT count(*) FROM mr_files"))[0] == 0:
        why += " (the store holds no merge request file lists yet: a sync fetches them)"
    return why


def _participant_empty(_con: "duckdb.DuckDBPyConnection", user: str) -> str:
    return (f"--participant {user}: no issue or merge request this user wrote, is assigned to or reviews, "
            "and no thread the user wrote in")


# spec name → (query, its parameters, why it matched nothing)
RESOLVERS = {
    "path": (PATH_SQL, _path_params, _path_empty),
    "participant": (PARTICIPANT_SQL, _participant_params, _participant_empty),
}


def matching_ids(con: "duckdb.DuckDBPyConnection", spec: FilterSpec, value: str) -> set[str]:
    """The ids of the documents one graph filter matches."""
    sql, params, _why = RESOLVERS[spec.name]
    return {row[0] for row in con.execute(sql, params(value)).fetchall()}


def stored_project(workspace: "Workspace", filters: Filters) -> Filters:
    """`filters` with `project` as the store writes it (another case, or a path the project had
    before a rename, resolve as `list --project` resolves them); a project the store does not
    hold is a usage error naming the synced ones, as `list` says it, not an empty answer.
    While a sync holds DuckDB the filter goes unchecked: the indexes answer without DuckDB, and a
    search must not wait on a sync for a check."""
    if not filters.project or filters.doc_ids is not None:
        return filters
    from gitlab_knowledge.errors import StoreBusyError
    from gitlab_knowledge.store.queries import check_project

    try:
        with workspace.read(wait=0) as con:
            project_id = check_project(con, filters.project)
            path = one_row(con.execute("SELECT path_with_namespace FROM projects WHERE id = ?", [project_id]))[0]
    except StoreBusyError:
        return filters
    return replace(filters, project=path)


def resolve(workspace: "Workspace", filters: Filters) -> tuple[Filters, list[str]]:
    """`filters` with their graph filters resolved to document ids (all of them must match), and
    a warning when they match nothing. Filters without graph filters are returned as they are
    (their project checked against the store)."""
    filters = stored_project(workspace, filters)
    graph = filters.graph()
    if not graph or filters.doc_ids is not None:
        return filters, []
    warnings: list[str] = []
    with workspace.read() as con:
        ids: set[str] | None = None
        for spec, value in graph:
            found = matching_ids(con, spec, value)
            if not found:
                warnings.append(RESOLVERS[spec.name][2](con, value))
            ids = found if ids is None else ids & found
        ids = ids or set()
        if not ids and not warnings:
            warnings.append(" and ".join(f"{spec.flag} {value}" for spec, value in graph)
                            + " each match documents, but no document matches all of them")
        if len(ids) >= COMPLEMENT_FROM:
            total = one_row(con.execute("SELECT count(*) FROM documents"))[0]
            if len(ids) * 2 > total:
                rest = {row[0] for row in con.execute("SELECT id FROM documents").fetchall()} - ids
                return filters.resolved(frozenset(rest), complement=True), warnings
    return filters.resolved(frozenset(ids)), warnings

