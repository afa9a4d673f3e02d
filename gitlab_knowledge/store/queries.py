"""Read-only questions the CLI (and the normalized asset's row counts) ask of the store.

Each reads through `workspace.read()`, so it sees what the workspace's lens lets it see.
"""

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import AmbiguousReference, ItemNotFound, UnknownProject, UsageError
from gitlab_knowledge.graph.paths import repo_path
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.store.projects import canonical_path, project_id_for
from gitlab_knowledge.timeutil import naive_utc

if TYPE_CHECKING:  # the workspace hands the read modules their connections: it sits above them
    from gitlab_knowledge.workspace import Workspace

THREAD_TABLES = ("discussions", "notes")
# Documents show an author they do not know as @unknown; the CLI says the same.
UNKNOWN_AUTHOR = "@unknown"


def author_label(username: str | None, name: str | None) -> str:
    """Who wrote it, for people: @username; an author without one (pre-v4 notes carry only a name
    and an email) by name; none at all (a deleted user, a null author) as @unknown."""
    if username:
        return f"@{username}"
    if name and name.strip():
        return name.strip()
    return UNKNOWN_AUTHOR


def project_id_of(workspace: "Workspace | None", con: duckdb.DuckDBPyConnection, project: str | None) -> int | None:
    """`check_project`'s answer, remembered per version of the store by a long-lived reader (the
    MCP server's, store/reader.py `remembered`): the path's id is read through the lens's
    `raw_payloads`, ~5 ms at 100K documents, and every item tool names a project."""
    if not project:
        return None
    reader = workspace.reader if workspace is not None else None
    if reader is None:
        return check_project(con, project)
    return reader.remembered(workspace.lens if workspace is not None else None, ("project_id", project),
                             lambda: check_project(con, project))


def project_paths(workspace: "Workspace | None", con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """The stored projects' paths by id (what a reference names) as `con`'s lens shows them,
    remembered per version of the store by a long-lived reader (the MCP server's): joined into a
    query they cost more."""
    def read() -> dict[int, str]:
        return dict(con.execute("SELECT id, path_with_namespace FROM projects").fetchall())
    reader = workspace.reader if workspace is not None else None
    return read() if reader is None else reader.remembered(workspace.lens if workspace else None, ("project_paths",), read)


def _project_filter(con: duckdb.DuckDBPyConnection, project: str | None,
                    column: str = "project_id") -> tuple[str, list[Any]]:
    """A clause keeping one project's rows, by the GitLab id its path resolves to (the path may be
    typed in another case, or be a name the project had before a rename)."""
    if not project:
        return "", []
    return f" AND {column} = ?", [check_project(con, project)]


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def project_counts(workspace: "Workspace", project: str | None = None) -> dict[str, int]:
    """Rows per item and thread table: of `project`, or of the whole store."""
    with workspace.read() as con:
        if project:
            return project_counts_of(con, {project: project_id_for(con, project)})[project]
        return {table: one_row(con.execute(f"SELECT count(*) FROM {table}"))[0]
                for table in (*(k.table for k in kinds.ITEM_KINDS), *THREAD_TABLES)}


def project_counts_of(con: duckdb.DuckDBPyConnection, project_ids: dict[str, int | None]) -> dict[str, dict[str, int]]:
    """`project_counts` of several projects (path -> id), a query per table for all of them."""
    out: dict[str, dict[str, int]] = {path: {} for path in project_ids}
    for table in (*(k.table for k in kinds.ITEM_KINDS), *THREAD_TABLES):
        counts = dict(con.execute(f"SELECT project_id, count(*) FROM {table} WHERE project_id IN "
                                  "(SELECT unnest(?::BIGINT[])) GROUP BY project_id",
                                  [list(project_ids.values())]).fetchall())
        for path, pid in project_ids.items():
            out[path][table] = int(counts.get(pid, 0))
    return out


def known_projects(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT path_with_namespace FROM projects ORDER BY 1").fetchall()]


def check_project(con: duckdb.DuckDBPyConnection, project: str | None) -> int | None:
    """The id of the stored project `project` names (UsageError if none)."""
    if not project:
        return None
    project_id = project_id_for(con, project)
    if project_id is None or not con.execute("SELECT 1 FROM projects WHERE id = ?", [project_id]).fetchone():
        raise UnknownProject(project, known_projects(con))
    return project_id


# `--state all` is GitLab's own word for "any state".
ANY_STATE = kinds.ANY_STATE


# How `list` orders: newest first by default.
SORTS = {"updated_desc": "t.updated_at DESC, t.id DESC", "updated_asc": "t.updated_at ASC, t.id ASC",
         "created_desc": "t.created_at DESC, t.id DESC", "created_asc": "t.created_at ASC, t.id ASC"}
# A TEXT[] of usernames or labels holds the value, compared without case (as GitLab compares them).
_HOLDS = "COALESCE(list_contains(list_transform({c}, lambda x: lower(x)), lower(?)), false)"
# A path (a file, or everything under a directory) an MR changed, or a review thread is on.
_PATH = "({c} = ? OR starts_with({c}, ?))"


@dataclass(frozen=True)
class ListFilters:
    """What `list` narrows by: every filter given must hold (labels: every one of them)."""

    state: str | None = None
    labels: tuple[str, ...] = ()
    author: str | None = None
    assignee: str | None = None
    reviewer: str | None = None
    milestone: str | None = None
    updated_since: datetime | None = None
    created_since: datetime | None = None
    path: str | None = None
    participant: str | None = None
    sort: str = "updated_desc"

    def where(self, kind: kinds.Kind) -> tuple[str, list[Any]]:
        """The SQL clauses (each starting with AND) over `t`, the kind's table, and their parameters."""
        if self.sort not in SORTS:
            raise UsageError(f"unknown sort {self.sort!r}: expected {', '.join(SORTS)}")
        mr = kind is kinds.MERGE_REQUEST
        for name, value in (("reviewer", self.reviewer), ("path", self.path)):
            if value and not mr:
                raise UsageError(f"{name} narrows merge requests (their reviewers, the files they changed), "
                                 f"not {kind.plural_display.lower()}")
        where, params = "", []  # type: tuple[str, list[Any]]
        if self.state and self.state != ANY_STATE:
            where, params = " AND t.state = ?", [self.state]
        for label in self.labels:
            where += f" AND {_HOLDS.format(c='t.labels')}"
            params.append(label)
        for column, value in (("t.author_username", self.author), ("t.milestone", self.milestone)):
            if value:
                where += f" AND lower({column}) = lower(?)"
                params.append(value.removeprefix("@") if column == "t.author_username" else value)
        for column, value in (("t.assignees", self.assignee), ("t.reviewers", self.reviewer)):
            if value:
                where += f" AND {_HOLDS.format(c=column)}"
                params.append(value.removeprefix("@"))
        for column, since in (("t.updated_at", self.updated_since), ("t.created_at", self.created_since)):
            if since is not None:
                where += f" AND {column} >= ?"
                params.append(naive_utc(since))
        if self.path:
            base = repo_path(self.path)
            if base is None:
                raise UsageError(f"path expects a file or directory of the repository, e.g. src/app.py, got {self.path!r}")
            files = " OR ".join(_PATH.format(c=c) for c in ("f.new_path", "f.old_path"))
            noted = " OR ".join(_PATH.format(c=c) for c in ("np.new_path", "np.old_path"))
            where += (f" AND (t.id IN (SELECT f.merge_request_id FROM mr_files f WHERE {files}) OR t.id IN ("
                      f"SELECT n.noteable_id FROM note_positions np JOIN notes n ON n.id = np.note_id "
                      f"WHERE n.noteable_type = '{kind.noteable_type}' AND ({noted})))")
            params += [base, base + "/"] * 4
        if self.participant:
            who = self.participant.removeprefix("@")
            people = " OR ".join(_HOLDS.format(c=f"t.{c}") for c in kind.people_columns)
            where += (f" AND (lower(t.author_username) = lower(?) OR {people} OR t.id IN (SELECT noteable_id "
                      f"FROM notes WHERE noteable_type = '{kind.noteable_type}' AND lower(author_username) = lower(?)))")
            params += [who, *[who] * len(kind.people_columns), who]
        return where, params


def list_items(workspace: "Workspace", kind: kinds.Kind, project: str | None, limit: int, state: str | None = None,
               filters: ListFilters | None = None) -> list[dict[str, Any]]:
    """The items of a kind that pass `filters` (and `state`), ordered by `filters.sort`, at most `limit`."""
    filters = filters or ListFilters()
    if state is not None:
        filters = dataclasses.replace(filters, state=state)
    table = kind.table
    extra = ", t.source_branch, t.target_branch, t.reviewers" if kind is kinds.MERGE_REQUEST else ""
    clauses, clause_params = filters.where(kind)
    with workspace.read() as con:
        where, params = _project_filter(con, project, "t.project_id")
        return _rows(con, f"""
            SELECT p.path_with_namespace AS project, t.iid, t.title, t.state, t.author_username AS author,
                   t.author_name, t.labels, t.assignees, t.milestone, t.created_at, t.updated_at, t.web_url{extra}
            FROM {table} t JOIN projects p ON p.id = t.project_id
            WHERE true{where}{clauses}
            ORDER BY {SORTS[filters.sort]} LIMIT ?
        """, [*params, *clause_params, limit])


def count(workspace: "Workspace", what: str, project: str | None) -> int:
    """`what` is a kind as a person types it (`issues`, `mrs`, `wiki`, …) or one of THREAD_TABLES."""
    kind = kinds.from_cli(what)
    keyed = kinds.keyed_from_cli(what)
    if kind is None and keyed is None and what not in THREAD_TABLES:
        # A kind's column heading, lowered, is also a word `count` takes: issues, mrs.
        words = [*(k.column.lower() for k in kinds.ITEM_KINDS), *(k.column for k in kinds.KEYED_KINDS), *THREAD_TABLES]
        raise UsageError(f"cannot count {what!r}: expected {', '.join(words[:-1])} or {words[-1]}")
    table = kind.table if kind else keyed.table if keyed else what
    with workspace.read() as con:
        where, params = _project_filter(con, project)
        return int(one_row(con.execute(f"SELECT count(*) FROM {table} WHERE true{where}", params))[0])


def show_item(workspace: "Workspace", kind: kinds.Kind, iid: int, project: str | None) -> dict[str, Any]:
    """An issue or MR with its threads and notes; asks for --project when the iid is ambiguous."""
    with workspace.read() as con:
        return with_threads(con, kind, item_row(con, kind, iid, project, workspace))


def item_row(con: duckdb.DuckDBPyConnection, kind: kinds.Kind, iid: int, project: str | None,
             workspace: "Workspace | None" = None) -> dict[str, Any]:
    """The item's own row (and its project's path), without its threads: the MCP item tools read
    its links and files beside its threads (mcp/items.py)."""
    table = kind.table
    where, params = (" AND t.project_id = ?", [project_id_of(workspace, con, project)]) if project else ("", [])
    # (the project's path as `project_paths` says it: a join with `projects` costs ~1 ms more)
    paths = project_paths(workspace, con)
    found = [{**r, "project": paths[r["project_id"]]} for r in _rows(con, f"""
        SELECT t.* FROM {table} t WHERE t.iid = ?{where}
    """, [iid, *params]) if r["project_id"] in paths]
    label = f"{kind.mid_sentence} {kind.ref(iid)}"
    if not found:
        raise ItemNotFound(label, kind.name, iid, project)
    if len(found) > 1:
        raise AmbiguousReference(label, [r["project"] for r in found])
    return found[0]


def with_threads(con: duckdb.DuckDBPyConnection, kind: kinds.Kind, item: dict[str, Any]) -> dict[str, Any]:
    """`item` (an `item_row`) with its threads, each with its notes in order."""
    noteable = kind.noteable_type
    threads = _rows(con, f"""
        SELECT id, individual_note, resolvable, resolved, first_note_at, last_note_at, note_count
        FROM discussions WHERE noteable_type = ? AND {kind.thread_column} = ?
        ORDER BY position, first_note_at
    """, [noteable, item["id"]])
    notes = _rows(con, """
        SELECT n.discussion_id, n.id, n.type, n.author_username AS author, n.author_name, n.body, n.created_at,
               n.updated_at, n.internal, n.resolved, p.new_path, p.new_line, p.old_path, p.old_line,
               p.line_range_start_old_line, p.line_range_start_new_line,
               p.line_range_end_old_line, p.line_range_end_new_line
        FROM notes n LEFT JOIN note_positions p ON p.note_id = n.id
        WHERE n.noteable_type = ? AND n.noteable_id = ? ORDER BY n.discussion_id, n.position
    """, [noteable, item["id"]])
    by_thread: dict[str, list[dict[str, Any]]] = {}
    for note in notes:
        by_thread.setdefault(note["discussion_id"], []).append(note)
    for thread in threads:
        thread["notes"] = by_thread.get(thread["id"], [])
    item["threads"] = threads
    return item


def sync_status(workspace: "Workspace", project: str | None = None) -> dict[str, Any]:
    """Recent runs, cursors, layers and how each configured project resolved; with `project`
    (any configured path or group member, in any case), that project's alone: one project among
    hundreds a group resolved to."""
    from gitlab_knowledge.store import groups

    config = workspace.config
    members = groups.members(config)
    with workspace.read() as con:
        explicit_ids = [project_id_for(con, path) for path in config.projects]
        named: list[tuple[str, int | None, str | None]] = [
            (path, pid, None) for path, pid in zip(config.projects, explicit_ids, strict=True)]
        paths = groups.project_paths(config, explicit_ids)
        kept = set(paths[len(config.projects):])
        named += [(m.path, m.project_id, m.group) for m in members if m.path in kept]
        if project is not None:
            named = [n for n in named if n[0].casefold() == project.casefold()]
            if not named:
                raise UsageError(f"project {project!r} is neither configured nor in a configured group's last listing "
                                 "(`sync-status --json` lists them all)")
        only = project is not None
        wanted = {n[1] for n in named if n[1] is not None}
        where = "WHERE lower(project_path) = lower(?) OR project_id IN (SELECT unnest(?::BIGINT[]))" if only else ""
        params: list[Any] = [project, sorted(wanted)] if only else []
        runs = _rows(con, f"""
            SELECT id, project_path, mode, status, started_at, finished_at, heartbeat_at, pid, dagster_run_id,
                   error, stats
            FROM sync_runs {where} ORDER BY id DESC LIMIT 20
        """, params)
        for run in runs:
            stats = json.loads(run.pop("stats") or "{}")
            run["totals"] = stats.get("totals", {})
            run["api_calls"] = stats.get("api_calls")
            run["duration_s"] = stats.get("duration_s")
        by_id = "WHERE c.project_id IN (SELECT unnest(?::BIGINT[]))" if only else ""
        cursors = _rows(con, f"""
            SELECT p.path_with_namespace AS project, c.resource_type, c.updated_at_cursor, c.tie_breaker_id,
                   c.moved_at
            FROM sync_cursors c LEFT JOIN projects p ON p.id = c.project_id {by_id} ORDER BY 1, 2
        """, [sorted(wanted)] if only else [])
        last_success = _rows(con, f"""
            SELECT project_path, max(finished_at) AS last_success FROM sync_runs
            WHERE status = 'succeeded' {"AND lower(project_path) = lower(?)" if only else ""} GROUP BY 1 ORDER BY 1
        """, [project] if only else [])
        layers = _rows(con, f"""
            SELECT p.path_with_namespace AS project, l.layer, l.watermark, l.updated_at,
                   (SELECT max(change_seq) FROM raw_payloads r WHERE r.project_id = l.project_id) AS raw_seq
            FROM layer_state l LEFT JOIN projects p ON p.id = l.project_id
            {by_id.replace("c.project_id", "l.project_id")} ORDER BY 1, 2
        """, [sorted(wanted)] if only else [])
        # A configured path may be a different spelling of the project's canonical path: the
        # cursors and layers above are keyed by the project GitLab resolved it to.
        resolved = []
        for path, project_id, group in named:
            project_id = project_id if project_id is not None else project_id_for(con, path)
            resolved.append({"configured": path, "project_id": project_id, "group": group,
                             "project": canonical_path(con, project_id) if project_id is not None else None})
    return {"runs": runs, "cursors": cursors, "last_success": last_success, "layers": layers,
            "configured_projects": list(config.projects), "groups": groups.summary(config), "projects": resolved}
