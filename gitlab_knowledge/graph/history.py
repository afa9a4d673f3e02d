"""`history`: the merge requests that touched a file or directory, newest first, renames followed back.

What the CLI command `history` prints and the MCP tool `file_history` returns (graph/answers.py
`History`, validated by cli/schemas/history.json). An MR touched a path when its file list
(`mr_files`) or one of its review notes (`note_positions`) names it.

Every query through a lens's views costs ~1.5-3 ms of CPU at 100K documents even for a few rows,
and one that reads `notes` ~5 ms (the view's anti-join with the lens's hidden lists over every
note), so the notes are read once per answer: the file lists are followed path by path (a rename
found there names the next path), then the review notes on every path followed come in one query,
and the first note of each thread shown is among them (GitLab puts a thread's position on each of
its notes), read again only for a thread whose first note is not.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.graph.answers import History
from gitlab_knowledge.graph.paths import repo_path
from gitlab_knowledge.graph.queries import excerpt, iso, links_for, public_item, rows
from gitlab_knowledge.store.queries import project_id_of
from gitlab_knowledge.workspace import Workspace


@dataclass(frozen=True)
class _Target:
    """A path the history follows: the one asked about, or one a file had before a rename."""

    base: str
    prefix: bool  # also every file under base/ (the path asked about may name a directory)
    project_id: int | None
    before: datetime | None  # a path a file was renamed from counts only until the rename
    rename: dict[str, Any] | None

    def sql(self, column: str) -> tuple[str, list[Any]]:
        # starts_with, not LIKE: a path may hold % or _.
        if self.prefix:
            return f"({column} = ? OR starts_with({column}, ?))", [self.base, self.base + "/"]
        return f"{column} = ?", [self.base]

    def matches(self, value: str | None) -> bool:
        return value is not None and (value == self.base or (self.prefix and value.startswith(self.base + "/")))

    def scope(self) -> tuple[str, list[Any]]:
        params: list[Any]
        where, params = "", []
        if self.project_id is not None:
            where, params = " AND m.project_id = ?", [self.project_id]
        if self.before is not None:
            where, params = where + " AND COALESCE(m.merged_at, m.updated_at) <= ?", [*params, self.before]
        return where, params

    def holds(self, row: dict[str, Any]) -> bool:
        """`scope()` on a row read for every target at once (its MR's project and time)."""
        if self.project_id is not None and row["project_id"] != self.project_id:
            return False
        if self.before is not None and (row["touched_at"] is None or row["touched_at"] > self.before):
            return False
        return self.matches(row["new_path"]) or self.matches(row["old_path"])


def _clean_path(path: str) -> str:
    text = repo_path(path)
    if text is None:
        raise UsageError(f"history expects a file or directory path of the repository, e.g. src/app.py, got {path!r}")
    return text


def _change(row: dict[str, Any]) -> str:
    if row["new_file"]:
        return "new"
    if row["deleted_file"]:
        return "deleted"
    return "renamed" if row["renamed_file"] else "modified"


# What the rows naming a path carry of their MR: what orders and scopes them. What the answer says
# of an MR is read for the MRs it shows only (turning a row into Python costs more than reading it:
# ~4 ms for 900 rows of nine columns).
_MR = "m.id AS merge_request_id, m.project_id, COALESCE(m.merged_at, m.updated_at) AS touched_at"
_SHOWN = ("m.id, m.iid, m.title, m.state, m.web_url, m.project_id, m.merged_at, m.updated_at, m.author_username, "
          "p.path_with_namespace AS project")


def _either(target: _Target, table: str) -> tuple[str, list[Any]]:
    """A row of `table` whose new or old path is the target."""
    new_sql, new_params = target.sql(f"{table}.new_path")
    old_sql, old_params = target.sql(f"{table}.old_path")
    return f"({new_sql} OR {old_sql})", [*new_params, *old_params]


def _file_rows(con: duckdb.DuckDBPyConnection, targets: list[_Target], root: _Target, follow: list[_Target],
               seen: set[tuple[int, str]], renames: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """For each of `targets` (the paths found at one step of following renames, read together),
    the MRs whose file list names it, one row each; queues the paths renamed into it (not a path
    the history asks about anyway: all of its MRs are in already), target by target in MR order.
    Which files an MR changed is read for the MRs shown only (`_files`)."""
    parts: list[str] = []
    params: list[Any] = []
    for k, target in enumerate(targets):
        scope, scope_params = target.scope()
        file_sql, file_params = _either(target, "f")
        # The MRs by a semi-join, and the rows that may be renames beside them (a row per file of
        # every MR, or a list per MR, cost ~2-3 ms more at 100K documents).
        parts += [f"""
            SELECT {k} AS k, {_MR}, NULL::BIGINT AS iid, NULL::TEXT AS project, NULL::INTEGER AS pos,
                   NULL::TEXT AS old_path, NULL::TEXT AS new_path
            FROM merge_requests m WHERE m.id IN (SELECT f.merge_request_id FROM mr_files f WHERE {file_sql}){scope}""",
                  f"""
            SELECT {k}, {_MR}, m.iid, p.path_with_namespace, f.position, f.old_path, f.new_path
            FROM mr_files f JOIN merge_requests m ON m.id = f.merge_request_id JOIN projects p ON p.id = m.project_id
            WHERE {file_sql}{scope} AND f.renamed_file AND NOT coalesce(f.new_file, false)
              AND NOT coalesce(f.deleted_file, false) AND f.old_path <> ''"""]
        params += [*file_params, *scope_params, *file_params, *scope_params]
    found = rows(con, " UNION ALL ".join(parts), params)
    out: list[list[dict[str, Any]]] = []
    for k, target in enumerate(targets):
        renamed = sorted((r for r in found if r["k"] == k and r["pos"] is not None), key=lambda r: (
            r["touched_at"] is None, r["touched_at"] or datetime.min, r["merge_request_id"], r["pos"]))
        for r in renamed:
            old, new = r["old_path"], r["new_path"]
            if target.matches(new) and not target.matches(old) and not root.matches(old) \
                    and (r["project_id"], old) not in seen:
                seen.add((r["project_id"], old))
                rename = {"from": old, "to": new, "by": kinds.MERGE_REQUEST.ref(r["iid"], r["project"]),
                          "at": iso(r["touched_at"])}
                renames.append(rename)
                follow.append(_Target(old, False, r["project_id"], r["touched_at"], rename))
        out.append([r for r in found if r["k"] == k and r["pos"] is None])
    return out


def _files(con: duckdb.DuckDBPyConnection, targets: list[_Target], hits: dict[int, dict[str, Any]],
           mr_ids: list[int]) -> None:
    """The files the shown MRs changed on the paths followed, path by path as they were followed,
    each MR's in GitLab's order (the first row of a file is the one said)."""
    if not mr_ids:
        return
    either = [_either(t, "f") for t in targets]
    found = rows(con, f"""
        SELECT {_MR}, f.position AS pos, f.old_path, f.new_path, f.new_file, f.renamed_file, f.deleted_file
        FROM mr_files f JOIN merge_requests m ON m.id = f.merge_request_id
        WHERE f.merge_request_id IN (SELECT unnest(?::BIGINT[])) AND ({' OR '.join(sql for sql, _ in either)})
        ORDER BY merge_request_id, pos""", [mr_ids, *[p for _, ps in either for p in ps]])
    for target in targets:
        for r in found:
            if not target.holds(r):
                continue
            change = _change(r)
            path = r["new_path"] or r["old_path"]
            hits[r["merge_request_id"]]["files"].setdefault(
                path, {"path": path, "old_path": r["old_path"] if change == "renamed" else None, "change": change})


def _note_rows(con: duckdb.DuckDBPyConnection, targets: list[_Target]) -> list[dict[str, Any]]:
    """The review notes positioned on any of `targets`, with their MRs, in one read of the notes
    (`first`: the note's id when it is its thread's first, at position 0)."""
    either = [_either(t, "np") for t in targets]
    scopes = {t.project_id for t in targets}
    # Every path followed is in one project when the root is: narrow the MRs in SQL too.
    scope, params = (" AND m.project_id = ?", [scopes.pop()]) if len(scopes) == 1 and None not in scopes else ("", [])
    return rows(con, f"""
        SELECT {_MR}, n.position AS pos, np.old_path, np.new_path, n.discussion_id, np.new_line, np.old_line,
               CASE WHEN n.position = 0 THEN n.id END AS first
        FROM note_positions np JOIN notes n ON n.id = np.note_id
        JOIN {kinds.MERGE_REQUEST.table} m ON n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}' AND m.id = n.noteable_id
        WHERE ({' OR '.join(sql for sql, _ in either)}){scope}""",
                [p for _, ps in either for p in ps] + params)


def _record(target: _Target, files: list[dict[str, Any]], notes: list[dict[str, Any]],
            hits: dict[int, dict[str, Any]]) -> None:
    """Record the MRs whose file list (`files`, one row per MR) or review notes name `target`:
    the notes in thread order, after the files, as one query per path read them."""
    mine = sorted((r for r in notes if target.holds(r)), key=lambda r: (r["discussion_id"], r["pos"]))
    for r in [*files, *mine]:
        entry = hits.setdefault(r["merge_request_id"], {"at": r["touched_at"], "files": {}, "threads": {},
                                                         "rename": target.rename})
        if "discussion_id" in r:
            path = r["new_path"] if target.matches(r["new_path"]) else r["old_path"]
            line = r["new_line"] if path == r["new_path"] and r["new_line"] is not None else r["old_line"]
            entry["threads"].setdefault(r["discussion_id"], {"path": path, "line": line})
            entry.setdefault("noted_paths", set()).add(path)


def _threads(con: duckdb.DuckDBPyConnection, positioned: dict[str, dict[str, Any]], mr_ids: list[int],
             notes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The review threads positioned on the path (of every MR at once): who opened them, how, and
    whether resolved, by thread id, oldest first. A thread is shown when the read's discussions
    hold it (a lens hides a thread holding a note it hides, so every note of a shown thread is
    read, and its first is the one at position 0), and its first note comes with it by id."""
    if not positioned:
        return {}
    wanted = list(positioned)
    firsts = sorted({r["first"] for r in notes if r["first"] is not None and r["discussion_id"] in positioned})
    # Two queries: joined in one, the notes were scanned for the join rather than looked up by id.
    by_thread = {r["discussion_id"]: r for r in rows(con, "SELECT discussion_id, author_username, body, created_at "
                                                         "FROM notes WHERE id IN (SELECT unnest(?::BIGINT[]))", [firsts])}
    shown = rows(con, f"""
        SELECT id, resolvable, resolved FROM discussions
        WHERE {kinds.MERGE_REQUEST.thread_column} IN (SELECT unnest(?::BIGINT[])) AND list_contains(?::TEXT[], id)""",
                 [mr_ids, wanted])
    for d in shown:
        note = by_thread.get(d["id"])
        d.update(has_first=note is not None, author_username=note and note["author_username"],
                 body=note and note["body"], created_at=note and note["created_at"])
    missing = [d["id"] for d in shown if not d["has_first"]]
    if missing:
        # A thread whose first note is not on the path (or not positioned): its notes are read.
        first = {r["discussion_id"]: r["note"] for r in rows(con, f"""
                SELECT n.discussion_id, arg_min({{'author': n.author_username, 'body': n.body, 'at': n.created_at}},
                                               n.position) AS note
                FROM notes n
                WHERE n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}'
                  AND n.noteable_id IN (SELECT unnest(?::BIGINT[])) AND list_contains(?::TEXT[], n.discussion_id)
                GROUP BY n.discussion_id""", [mr_ids, missing])}
        for d in shown:
            if not d["has_first"] and d["id"] in first:
                note = first[d["id"]]
                d.update(has_first=True, author_username=note["author"], body=note["body"], created_at=note["at"])
    # Oldest first (a note without a time last, as SQL orders NULLs), then by thread id.
    shown = sorted((d for d in shown if d["has_first"]),
                   key=lambda d: (d["created_at"] is None, d["created_at"] or datetime.min, d["id"]))
    return {d["id"]: {"discussion_id": d["id"], "path": positioned[d["id"]]["path"],
                      "line": positioned[d["id"]]["line"], "author": d["author_username"],
                      "created_at": iso(d["created_at"]), "excerpt": excerpt(d["body"]),
                      "resolvable": bool(d["resolvable"]), "resolved": bool(d["resolved"])} for d in shown}


def _shown(con: duckdb.DuckDBPyConnection, mr_ids: list[int]) -> dict[int, dict[str, Any]]:
    """What the answer says of the MRs it shows, by id."""
    if not mr_ids:
        return {}
    return {r["id"]: r for r in rows(con, f"SELECT {_SHOWN} FROM {kinds.MERGE_REQUEST.table} m "
                                          "JOIN projects p ON p.id = m.project_id WHERE m.id IN (SELECT unnest(?::BIGINT[]))",
                                     [mr_ids])}


def history(workspace: Workspace, path: str, project: str | None = None, limit: int = 50) -> History:
    """The merge requests that touched `path` (a file, or every file under a directory), newest
    first, following renames back: an MR that renamed X to the path brings in the MRs on X before it."""
    if limit < 1:
        raise UsageError(f"history's limit must be at least 1, got {limit}")
    base = _clean_path(path)
    with workspace.read() as con:
        pid = project_id_of(workspace, con, project)
        renames: list[dict[str, Any]] = []
        root = _Target(base, True, pid, None, None)
        targets = [root]
        # The cycle guard: a path is followed once per project (A → B, then B → A again).
        seen: set[tuple[int, str]] = set()
        files: list[list[dict[str, Any]]] = []
        while len(files) < len(targets):
            files += _file_rows(con, targets[len(files):], root, targets, seen, renames)
        notes = _note_rows(con, targets)
        hits: dict[int, dict[str, Any]] = {}
        # Path by path as they were followed, each path's file rows before its notes: an MR is
        # counted under the first path that names it (the rename it came through).
        for target, rows_of_target in zip(targets, files, strict=True):
            _record(target, rows_of_target, notes, hits)
        newest = sorted(hits, key=lambda mr_id: (hits[mr_id]["at"] or datetime.min, mr_id), reverse=True)[:limit]
        # What they are, their links and their threads in a few queries for all of them, not per MR.
        found = _shown(con, newest)
        _files(con, targets, hits, newest)
        links = links_for(con, workspace.config, kinds.MERGE_REQUEST, [found[i] for i in newest if i in found])
        threads = _threads(con, {t: where for i in newest for t, where in hits[i]["threads"].items()}, newest, notes)
        out = []
        for mr_id in newest:
            hit, mr = hits[mr_id], found[mr_id]
            files_of = list(hit["files"].values()) or [
                {"path": p, "old_path": None, "change": None} for p in sorted(hit.get("noted_paths", ()))]
            out.append({**public_item(kinds.MERGE_REQUEST, mr), "merged_at": iso(mr["merged_at"]),
                        "updated_at": iso(mr["updated_at"]), "author": mr["author_username"], "files": files_of,
                        "followed_rename": hit["rename"],
                        "closes": [{k: c[k] for k in ("reference", "title", "state", "url")} for c in links[mr_id]["closes"]],
                        "links": {g: [{k: c[k] for k in ("reference", "type", "title", "state", "url")} for c in group]
                                  for g, group in links[mr_id].items()},
                        "threads": [thread for t, thread in threads.items() if t in hit["threads"]]})
    return History(path=base, project=project, total=len(hits), renames=renames, merge_requests=out)
