"""`history`: the merge requests that touched a file or directory, newest first, renames followed back.

What the CLI command `history` prints and the MCP tool `file_history` returns (graph/answers.py
`History`, validated by cli/schemas/history.json). An MR touched a path when its file list
(`mr_files`) or one of its review notes (`note_positions`) names it.

The graph layer keeps a row per file of an MR's file list and per review note on a diff line,
with what the answer says of the MR and the note's thread (`path_touches`, graph/path_rows.py):
every query through a lens's views costs ~1.5-3 ms of CPU at 100K documents even for a few rows,
and one joining `notes` ~5-9 ms, so an answer is one read of those rows for the path asked about
(the rows of the paths renamed into it come with them: on the benchmark's store every rename is
one step from the path asked about; a rename further back is one more read), then one for the
MRs shown (their files and threads on the paths followed). Their links are read meanwhile on
another connection, for the newest MRs on the path itself: the MRs shown but for one reached
through a rename and newer than those, whose links are read after.
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
from gitlab_knowledge.store.alongside import read_alongside
from gitlab_knowledge.store.queries import project_id_of, project_paths
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

    def holds(self, row: dict[str, Any]) -> bool:
        """The row (of `path_touches`, read for every target at once) names the target within its
        scope: its MR's project and time."""
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


_RENAME = ("t.note_id IS NULL AND t.renamed_file AND NOT coalesce(t.new_file, false) "
           "AND NOT coalesce(t.deleted_file, false) AND t.old_path <> ''")


def _either(target: _Target, table: str) -> tuple[str, list[Any]]:
    """A row of `table` whose new or old path is the target."""
    new_sql, new_params = target.sql(f"{table}.new_path")
    old_sql, old_params = target.sql(f"{table}.old_path")
    return f"({new_sql} OR {old_sql})", [*new_params, *old_params]


def _scope(target: _Target) -> tuple[str, list[Any]]:
    params: list[Any]
    where, params = "", []
    if target.project_id is not None:
        where, params = " AND t.project_id = ?", [target.project_id]
    if target.before is not None:
        where, params = where + " AND t.touched_at <= ?", [*params, target.before]
    return where, params


def _read(con: duckdb.DuckDBPyConnection, targets: list[_Target]) -> list[dict[str, Any]]:
    """The rows of `path_touches` (graph/path_rows.py) naming any of `targets`, one per MR and pair
    of paths, and those naming a path renamed into one of them (the next step of following
    renames, read ahead: on the benchmark's store every rename is one step from the path asked
    about, so an answer is one read). `rename_pos`: the row is a rename, at that place in its MR's
    file list. Which target a row names is said by `_Target.holds`, as the SQL chose it."""
    match: list[str] = []
    params: list[Any] = []
    for target in targets:
        either, either_params = _either(target, "t")
        scope, scope_params = _scope(target)
        match.append(f"({either}{scope})")
        params += [*either_params, *scope_params]
    return rows(con, f"""
        WITH named AS (SELECT * FROM path_touches t WHERE {' OR '.join(match)}),
        ahead AS (SELECT DISTINCT t.project_id, t.old_path FROM named t WHERE {_RENAME})
        SELECT t.merge_request_id, t.project_id, t.touched_at, t.iid, t.old_path, t.new_path,
               min(t.position) FILTER (WHERE {_RENAME}) AS rename_pos
        FROM (SELECT * FROM named UNION ALL
              SELECT n.* FROM path_touches n JOIN ahead a
              ON n.project_id = a.project_id AND (n.new_path = a.old_path OR n.old_path = a.old_path)) t
        GROUP BY ALL""", params)


def _follow(con: duckdb.DuckDBPyConnection, root: _Target, paths: dict[int, str]
            ) -> tuple[list[_Target], list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The paths the history follows (the one asked about, then each path a file had before a
    rename into one followed, not one the history asks about anyway: all of its MRs are in
    already), each with the rows naming it, and the renames followed, path by path in MR order."""
    pool: list[dict[str, Any]] = []
    read: set[tuple[int | None, str]] = set()  # the paths whose rows are in the pool

    def fetch(batch: list[_Target]) -> None:
        # (a row of a project not stored, as an inner join with the projects would drop it)
        found = [r for r in _read(con, batch) if r["project_id"] in paths]
        pool.extend(found)
        # The paths read, and those read ahead: renamed into one of them (a row `_read` chose as
        # naming one of the batch, not a row read ahead).
        read.update((t.project_id, t.base) for t in batch)
        read.update((r["project_id"], r["old_path"]) for r in found
                    if r["rename_pos"] is not None and any(t.holds(r) for t in batch))

    fetch([root])
    targets: list[_Target] = [root]
    found: list[list[dict[str, Any]]] = []
    renames: list[dict[str, Any]] = []
    # The cycle guard: a path is followed once per project (A → B, then B → A again).
    seen: set[tuple[int, str]] = set()
    while len(found) < len(targets):
        target = targets[len(found)]
        if (target.project_id, target.base) not in read:
            # A path not read ahead (a rename two steps away): it and the rest of its step, at once.
            fetch([t for t in targets[len(found):] if (t.project_id, t.base) not in read])
        mine = [r for r in pool if target.holds(r)]
        for r in sorted((r for r in mine if r["rename_pos"] is not None), key=lambda r: (
                r["touched_at"] is None, r["touched_at"] or datetime.min, r["merge_request_id"], r["rename_pos"])):
            old, new = r["old_path"], r["new_path"]
            if target.matches(new) and not target.matches(old) and not root.matches(old) \
                    and (r["project_id"], old) not in seen:
                seen.add((r["project_id"], old))
                rename = {"from": old, "to": new, "by": kinds.MERGE_REQUEST.ref(r["iid"], paths[r["project_id"]]),
                          "at": iso(r["touched_at"])}
                renames.append(rename)
                targets.append(_Target(old, False, r["project_id"], r["touched_at"], rename))
        found.append(mine)
    return targets, found, renames


def _details(con: duckdb.DuckDBPyConnection, targets: list[_Target], hits: dict[int, dict[str, Any]],
             mr_ids: list[int]) -> tuple[dict[int, dict[str, Any]], dict[str, dict[str, Any]]]:
    """For the MRs shown, in one query: what the answer says of each, by id; the files they changed
    on the paths followed (path by path as they were followed, each MR's in GitLab's order: the
    first row of a file is the one said), the review threads on them (located at the note at the
    lowest position on a path followed, as one query per path read them) and the notes' paths,
    into `hits`; and the threads shown, by id (a thread a lens hides has no `thread`), oldest
    first."""
    if not mr_ids:
        return {}, {}
    either = [_either(t, "t") for t in targets]
    found = rows(con, f"""
        SELECT t.merge_request_id AS id, t.project_id, t.touched_at, t.note_id, t.position AS pos, t.old_path,
               t.new_path, t.new_file, t.renamed_file, t.deleted_file, t.discussion_id, t.new_line, t.old_line, t.thread,
               t.iid, t.title, t.state, t.web_url, t.merged_at, t.updated_at, t.author_username
        FROM path_touches t
        WHERE t.merge_request_id IN (SELECT unnest(?::BIGINT[])) AND ({' OR '.join(sql for sql, _ in either)})
        ORDER BY t.merge_request_id, t.position""", [mr_ids, *[p for _, ps in either for p in ps]])
    for r in found:  # (the project's path as `project_paths` says it)
        r.update(merge_request_id=r["id"], project=hits[r["id"]]["project"])
    shown = {r["id"]: r for r in found}
    files = [r for r in found if r["note_id"] is None]
    notes = sorted((r for r in found if r["note_id"] is not None), key=lambda r: (r["discussion_id"], r["pos"]))
    threads: dict[str, dict[str, Any]] = {}
    for target in targets:
        for r in files:
            if not target.holds(r):
                continue
            change = _change(r)
            path = r["new_path"] or r["old_path"]
            hits[r["merge_request_id"]]["files"].setdefault(
                path, {"path": path, "old_path": r["old_path"] if change == "renamed" else None, "change": change})
        for r in notes:
            if not target.holds(r):
                continue
            entry = hits[r["merge_request_id"]]
            path = r["new_path"] if target.matches(r["new_path"]) else r["old_path"]
            line = r["new_line"] if path == r["new_path"] and r["new_line"] is not None else r["old_line"]
            entry["threads"].setdefault(r["discussion_id"], {"path": path, "line": line})
            entry.setdefault("noted_paths", set()).add(path)
            if r["thread"] is not None:
                threads[r["discussion_id"]] = r["thread"]
    # Oldest first (a note without a time last, as SQL orders NULLs), then by thread id.
    oldest = sorted(threads, key=lambda t: (threads[t]["created_at"] is None, threads[t]["created_at"] or datetime.min, t))
    positioned = {t: where for i in mr_ids for t, where in hits[i]["threads"].items()}
    return shown, {t: {"discussion_id": t, "path": positioned[t]["path"], "line": positioned[t]["line"],
                "author": threads[t]["author_username"], "created_at": iso(threads[t]["created_at"]),
                "excerpt": excerpt(threads[t]["body"]), "resolvable": bool(threads[t]["resolvable"]),
                "resolved": bool(threads[t]["resolved"])} for t in oldest}


def _newest(con: duckdb.DuckDBPyConnection, root: _Target, paths: dict[int, str], limit: int) -> list[dict[str, Any]]:
    """The newest `limit` MRs naming `root` itself (of the projects `paths` holds), newest first as
    `history` orders them: what the answer shows unless an MR reached through a rename is newer
    than one of them (the paths a file had before are older than its rename, an MR naming the path
    itself)."""
    either, either_params = _either(root, "t")
    scope, scope_params = _scope(root)
    found = rows(con, f"""
        SELECT t.merge_request_id AS id, t.iid, t.project_id, max(t.touched_at) AS touched
        FROM path_touches t WHERE {either}{scope} AND list_contains(?::BIGINT[], t.project_id)
        GROUP BY ALL ORDER BY touched DESC NULLS LAST, id DESC LIMIT ?""",
                 [*either_params, *scope_params, sorted(paths), limit])
    return [_linked(r["id"], r["iid"], r["project_id"], paths) for r in found]


def _linked(mr_id: int, iid: int, project_id: int, paths: dict[int, str]) -> dict[str, Any]:
    """An MR as `links_for` takes it."""
    return {"id": mr_id, "iid": iid, "project_id": project_id, "project": paths[project_id]}


def history(workspace: Workspace, path: str, project: str | None = None, limit: int = 50) -> History:
    """The merge requests that touched `path` (a file, or every file under a directory), newest
    first, following renames back: an MR that renamed X to the path brings in the MRs on X before it."""
    if limit < 1:
        raise UsageError(f"history's limit must be at least 1, got {limit}")
    base = _clean_path(path)
    with workspace.read() as con:
        pid = project_id_of(workspace, con, project)
        root = _Target(base, True, pid, None, None)
        paths = project_paths(workspace, con)

        def ahead(other: duckdb.DuckDBPyConnection) -> dict[int, dict[str, list[dict[str, Any]]]]:
            return links_for(other, workspace.config, kinds.MERGE_REQUEST, _newest(other, root, paths, limit), paths)

        # The links need only which MRs are shown, nearly always the newest on the path itself:
        # read from the start on another connection while this one follows the renames and reads
        # the files and threads (on 2 cores the answer took 12.9 ms at 100K documents instead of
        # 17.3 when the links waited for the MRs shown).
        with read_alongside(con, ahead) as later:
            targets, found_at, renames = _follow(con, root, paths)
            hits: dict[int, dict[str, Any]] = {}
            # Path by path as they were followed: an MR is counted under the first path that names
            # it (the rename it came through).
            for target, rows_of_target in zip(targets, found_at, strict=True):
                for r in rows_of_target:
                    hits.setdefault(r["merge_request_id"], {"at": r["touched_at"], "project": paths[r["project_id"]],
                                                            "files": {}, "threads": {}, "rename": target.rename,
                                                            "iid": r["iid"], "project_id": r["project_id"]})
            newest = sorted(hits, key=lambda mr_id: (hits[mr_id]["at"] or datetime.min, mr_id), reverse=True)[:limit]
            # What they are, their files and threads in one query for all of them, not per MR.
            found, threads = _details(con, targets, hits, newest)
            links = later.result()
        missed = [_linked(i, hits[i]["iid"], hits[i]["project_id"], paths) for i in newest if i not in links]
        if missed:
            links = {**links, **links_for(con, workspace.config, kinds.MERGE_REQUEST, missed, paths)}
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
