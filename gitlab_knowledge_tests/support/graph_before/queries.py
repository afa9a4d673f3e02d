"""Questions the knowledge graph answers: what an item links to, and which MRs touched a file.

`related`, `history`, `me` and `person` answer what the CLI commands of the same names print and
the MCP tools return: each a typed record (graph/answers.py) whose `as_dict()` is the --json
document (timestamps as ISO 8601 strings), validated by cli/schemas/<name>.json. They read the
store only.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.explain import NoteNotStored, resolve
from gitlab_knowledge.graph.answers import History, Related
from gitlab_knowledge.graph.paths import repo_path
from gitlab_knowledge.graph.refs import INVERSE
from gitlab_knowledge.store.queries import check_project
from gitlab_knowledge.workspace import Workspace

# The groups `related` sorts links into, in the order they are printed.
GROUPS = ("closes", "closed_by", "mentions", "mentioned_in", "related", "duplicate_of", "duplicated_by",
          "blocks", "blocked_by", "moved_to", "moved_from")
# A row read from the item it was written in keeps its kind; read from its target, it is the
# other side of the same link ("#234 closed_by !847" is "!847 closes #234").
_INCOMING = INVERSE
VIA = ("title", "description", "note", "system_note", "text")  # text: a wiki page's
EXCERPT_CHARS = 200
ITEM_COLUMNS = ("t.id, t.iid, t.title, t.state, t.web_url, t.project_id, t.created_at, t.updated_at, t.closed_at, "
                "t.author_username, t.labels, p.path_with_namespace AS project")


def iso(value: Any) -> str | None:
    """A stored (naive UTC) timestamp as the JSON documents write it: `2024-03-15T09:12:44Z`."""
    if not isinstance(value, datetime):
        return None
    stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
    return stamp.isoformat().replace("+00:00", "Z")


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The text on one line, cut at `limit` characters with an ellipsis."""
    flat = re.sub(r"\s+", " ", text or "").strip()
    return flat if len(flat) <= limit else flat[:limit - 1].rstrip() + "…"


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def item_url(config: Config, path: str, kind: kinds.Kind, iid: int) -> str:
    """The web address of an item the store does not hold, as GitLab would write it."""
    return kind.url(config.gitlab.display_url, path, iid)


def public_item(kind: kinds.Kind, row: dict[str, Any]) -> dict[str, Any]:
    """What every answer says about a stored issue or MR."""
    return {"reference": kind.ref(row["iid"], row["project"]), "type": kind.name, "title": row["title"],
            "state": row["state"], "url": row["web_url"]}


def project_id(con: duckdb.DuckDBPyConnection, project: str | None) -> int | None:
    """The id of the stored project `project` names; a one-line error for a project not synced."""
    return check_project(con, project) if project else None


def stored_item(con: duckdb.DuckDBPyConnection, kind: kinds.Kind, where: str,
                params: list[Any]) -> dict[str, Any] | None:
    found = rows(con, f"SELECT {ITEM_COLUMNS} FROM {kind.table} t JOIN projects p ON p.id = t.project_id "
                      f"WHERE {where}", params)
    return found[0] if found else None


# -- related ------------------------------------------------------------------------------------


def resolve_item(con: duckdb.DuckDBPyConnection, ref: str, project: str | None,
                 command: str = "related") -> tuple[kinds.Kind, dict[str, Any]]:
    """The issue or MR a reference, URL or document id names (a thread's document or note URL:
    the item it belongs to)."""
    project_id(con, project)  # an unknown --project is said as such, not as an unknown item
    try:
        doc_id = resolve(con, ref, project, command)
    except NoteNotStored as missing:
        # The item is what matters here, not the note: any note of it names it.
        doc_id = resolve(con, missing.kind.ref(missing.iid, missing.project), None)
    name, _, key = doc_id.partition(":")
    keyed = kinds.keyed(name)
    if keyed is not None:
        raise UsageError(f"{command} takes an issue or merge request; the issues and MRs a {keyed.noun} links to "
                         f"are in `show {keyed.cli_names[0]} <{keyed.key_column}>`")
    if name == kinds.DISCUSSION:
        thread = con.execute(f"SELECT noteable_type, {', '.join(k.thread_column for k in kinds.ITEM_KINDS)} "
                             "FROM discussions WHERE id = ?", [key]).fetchone()
        if thread is None:
            raise UsageError(f"no thread {key} in the store")
        kind = kinds.by_noteable_type(thread[0])
        key = str(thread[1 + kinds.ITEM_KINDS.index(kind)])
    else:
        kind = kinds.kind(name)
    item = stored_item(con, kind, "t.id = ?", [int(key)])
    if item is None:
        raise UsageError(f"no {kind.name.replace('_', ' ')} {key} in the store")
    return kind, item


def links_of(con: duckdb.DuckDBPyConnection, config: Config, kind: kinds.Kind,
             item: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The item's links, grouped, each other item once per group."""
    return links_for(con, config, kind, [item])[item["id"]]


def links_for(con: duckdb.DuckDBPyConnection, config: Config, kind: kinds.Kind,
              items: list[dict[str, Any]]) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """`links_of` for each of several items of one kind, by item id, read in a few queries for all
    of them: the links and then the items on their other side (a query per link cost ~1.5 ms each
    at 100K documents, and an MR links a dozen items)."""
    out: dict[int, dict[str, dict[tuple[str, str], dict[str, Any]]]] = {i["id"]: {g: {} for g in GROUPS} for i in items}
    if not items:
        return {}
    outgoing = rows(con, """
        SELECT source_id, kind, found_in, target_type, target_path, target_iid, target_project_id, external
        FROM item_references WHERE source_type = ? AND source_id IN (SELECT unnest(?::BIGINT[]))""",
                    [kind.name, [i["id"] for i in items]])
    incoming = rows(con, """
        SELECT kind, found_in, source_type, source_id, target_iid, target_project_id, target_path FROM item_references
        WHERE target_type = ? AND target_iid IN (SELECT unnest(?::BIGINT[]))""",
                    [kind.name, sorted({i["iid"] for i in items})])
    # A link not resolved when it was read names its project by path: it may have been synced since.
    paths: dict[str, int] = {}
    for pid, path in con.execute("SELECT id, lower(path_with_namespace) FROM projects ORDER BY id DESC").fetchall():
        paths[path] = pid
    for r in outgoing:
        r["pid"] = r["target_project_id"] if r["target_project_id"] is not None else paths.get(r["target_path"].lower())
    by_key = _items_keyed(con, {(r["target_type"], r["pid"], r["target_iid"]) for r in outgoing if r["pid"] is not None})
    by_id = _items_by_id(con, {(r["source_type"], r["source_id"]) for r in incoming})
    for r in outgoing:
        target_kind = kinds.kind(r["target_type"])
        found = by_key.get((r["target_type"], r["pid"], r["target_iid"]))
        if found is not None and found["id"] == r["source_id"] and target_kind is kind:
            continue  # an item naming itself links nothing
        if found is not None:
            link = {**public_item(target_kind, found), "external": bool(r["external"]), "in_store": True}
        else:
            link = {"reference": target_kind.ref(r["target_iid"], r["target_path"]), "type": target_kind.name,
                    "title": None, "state": None,
                    "url": item_url(config, r["target_path"], target_kind, r["target_iid"]),
                    "external": bool(r["external"]), "in_store": False}
        _add(out[r["source_id"]][r["kind"]], link, r["found_in"])
    by_project = {(i["iid"], i["project_id"]): i for i in items}
    by_path = {(i["iid"], i["project"].lower()): i for i in items}
    for r in incoming:
        target = by_project.get((r["target_iid"], r["target_project_id"])) if r["target_project_id"] is not None \
            else by_path.get((r["target_iid"], (r["target_path"] or "").lower()))
        keyed = kinds.keyed(r["source_type"])
        if keyed is not None:
            # Written in a wiki page: the page is the other side (read through the same lens).
            page = _keyed_source(con, keyed, r["source_id"]) if target is not None else None
            if target is not None and page is not None:
                _add(out[target["id"]][_INCOMING[r["kind"]]], page, r["found_in"])
            continue
        source_kind = kinds.kind(r["source_type"])
        source = by_id.get((r["source_type"], r["source_id"]))
        # A source gone from the store was deleted since: the next run drops the row.
        if target is None or source is None or (source_kind is kind and r["source_id"] == target["id"]):
            continue
        link = {**public_item(source_kind, source), "external": False, "in_store": True}
        _add(out[target["id"]][_INCOMING[r["kind"]]], link, r["found_in"])
    return {i: {g: sorted(links.values(), key=_link_order) for g, links in groups.items()} for i, groups in out.items()}


def _items_keyed(con: duckdb.DuckDBPyConnection,
                 wanted: set[tuple[str, int, int]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    """Stored items by (kind name, project id, iid), one query per kind for all of them."""
    out = {}
    for kind in kinds.ITEM_KINDS:
        keys = sorted((pid, iid) for name, pid, iid in wanted if name == kind.name)
        if keys:
            for r in rows(con, f"""
                    SELECT {ITEM_COLUMNS} FROM {kind.table} t JOIN projects p ON p.id = t.project_id
                    JOIN (SELECT unnest(?::BIGINT[]) AS pid, unnest(?::BIGINT[]) AS iid) w
                      ON t.project_id = w.pid AND t.iid = w.iid""", [[k[0] for k in keys], [k[1] for k in keys]]):
                out[(kind.name, r["project_id"], r["iid"])] = r
    return out


def _items_by_id(con: duckdb.DuckDBPyConnection, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Stored items by (kind name, id), one query per kind for all of them."""
    out = {}
    for kind in kinds.ITEM_KINDS:
        ids = sorted(i for name, i in wanted if name == kind.name)
        if ids:
            for r in rows(con, f"SELECT {ITEM_COLUMNS} FROM {kind.table} t JOIN projects p ON p.id = t.project_id "
                               "WHERE t.id IN (SELECT unnest(?::BIGINT[]))", [ids]):
                out[(kind.name, r["id"])] = r
    return out


def _add(group: dict[tuple[str, str], dict[str, Any]], link: dict[str, Any], found_in: str) -> None:
    key = (link["type"], link["reference"].lower())
    kept = group.setdefault(key, {**link, "via": []})
    if found_in not in kept["via"]:
        kept["via"] = sorted([*kept["via"], found_in], key=lambda v: VIA.index(v) if v in VIA else len(VIA))


def _keyed_source(con: duckdb.DuckDBPyConnection, kind: kinds.KeyedKind, row_id: int) -> dict[str, Any] | None:
    """A row of a keyed kind (a wiki page) as a link: named `acme/platform wiki:<slug>`."""
    found = rows(con, f"SELECT t.{kind.key_column} AS key, t.title, t.web_url, p.path_with_namespace AS project "
                      f"FROM {kind.table} t JOIN projects p ON p.id = t.project_id WHERE t.id = ?", [row_id])
    if not found:
        return None  # gone since, or hidden by the lens
    page = found[0]
    return {"reference": kind.ref(page["key"], page["project"]), "type": kind.name, "title": page["title"],
            "state": None, "url": page["web_url"], "external": False, "in_store": True}


def _link_order(link: dict[str, Any]) -> tuple[Any, ...]:
    keyed = kinds.keyed(link["type"])
    if keyed is not None:
        project, _, key = link["reference"].partition(f" {keyed.prefix}:")
        return (project.lower(), link["type"], 0, key)
    project, _, iid = link["reference"].rpartition(kinds.kind(link["type"]).sigil)
    return (project.lower(), link["type"], int(iid) if iid.isdigit() else 0)


def related(workspace: Workspace, ref: str, project: str | None = None) -> Related:
    """An issue or MR and everything it links to or is linked from, grouped by kind of link."""
    with workspace.read() as con:
        kind, item = resolve_item(con, ref, project)
        links = links_of(con, workspace.config, kind, item)
    return Related(item=public_item(kind, item), links=links)


# -- history ------------------------------------------------------------------------------------


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


def _touches(con: duckdb.DuckDBPyConnection, target: _Target, root: _Target, hits: dict[int, dict[str, Any]],
             follow: list[_Target], seen: set[tuple[int, str]], renames: list[dict[str, Any]]) -> None:
    """Record the MRs whose file list or DiffNotes name `target`; queue the paths renamed into it
    (not a path the history asks about anyway: all of its MRs are in already)."""
    new_sql, new_params = target.sql("f.new_path")
    old_sql, old_params = target.sql("f.old_path")
    scope, scope_params = target.scope()
    files = rows(con, f"""
        SELECT f.merge_request_id, m.project_id, m.iid, p.path_with_namespace AS project,
               COALESCE(m.merged_at, m.updated_at) AS touched_at, f.old_path, f.new_path, f.new_file, f.renamed_file,
               f.deleted_file
        FROM mr_files f JOIN merge_requests m ON m.id = f.merge_request_id JOIN projects p ON p.id = m.project_id
        WHERE ({new_sql} OR {old_sql}){scope} ORDER BY touched_at, f.merge_request_id, f.position""",
                 [*new_params, *old_params, *scope_params])
    for r in files:
        entry = hits.setdefault(r["merge_request_id"], {"at": r["touched_at"], "files": {}, "threads": {},
                                                         "rename": target.rename})
        change = _change(r)
        path = r["new_path"] or r["old_path"]
        entry["files"].setdefault(path, {"path": path, "old_path": r["old_path"] if change == "renamed" else None,
                                         "change": change})
        old = r["old_path"]
        if change == "renamed" and old and target.matches(r["new_path"]) and not target.matches(old) \
                and not root.matches(old) and (r["project_id"], old) not in seen:
            seen.add((r["project_id"], old))
            rename = {"from": old, "to": r["new_path"],
                      "by": kinds.MERGE_REQUEST.ref(r["iid"], r["project"]), "at": iso(r["touched_at"])}
            renames.append(rename)
            follow.append(_Target(old, False, r["project_id"], r["touched_at"], rename))
    new_sql, new_params = target.sql("np.new_path")
    old_sql, old_params = target.sql("np.old_path")
    notes = rows(con, f"""
        SELECT m.id AS merge_request_id, COALESCE(m.merged_at, m.updated_at) AS touched_at, n.discussion_id,
               np.new_path, np.old_path, np.new_line, np.old_line
        FROM note_positions np JOIN notes n ON n.id = np.note_id
        JOIN {kinds.MERGE_REQUEST.table} m ON n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}' AND m.id = n.noteable_id
        WHERE ({new_sql} OR {old_sql}){scope} ORDER BY n.discussion_id, n.position""",
                 [*new_params, *old_params, *scope_params])
    for r in notes:
        entry = hits.setdefault(r["merge_request_id"], {"at": r["touched_at"], "files": {}, "threads": {},
                                                         "rename": target.rename})
        path = r["new_path"] if target.matches(r["new_path"]) else r["old_path"]
        line = r["new_line"] if path == r["new_path"] and r["new_line"] is not None else r["old_line"]
        entry["threads"].setdefault(r["discussion_id"], {"path": path, "line": line})
        entry.setdefault("noted_paths", set()).add(path)


def _threads(con: duckdb.DuckDBPyConnection, positioned: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The review threads positioned on the path (of every MR at once): who opened them, how, and
    whether resolved, by thread id, oldest first. The notes are narrowed to those threads before the first of
    each is picked (a window over every note cost ~40 ms per MR at 100K documents)."""
    if not positioned:
        return {}
    firsts = rows(con, """
        WITH wanted AS (SELECT unnest(?::TEXT[]) AS id),
             first AS (SELECT n.discussion_id, n.author_username, n.body, n.created_at FROM notes n
                       WHERE n.discussion_id IN (SELECT id FROM wanted)
                       QUALIFY row_number() OVER (PARTITION BY n.discussion_id ORDER BY n.position) = 1)
        SELECT d.id, d.resolvable, d.resolved, f.author_username, f.body, f.created_at
        FROM first f JOIN discussions d ON d.id = f.discussion_id
        ORDER BY f.created_at, d.id""", [list(positioned)])
    return {t["id"]: {"discussion_id": t["id"], "path": positioned[t["id"]]["path"],
                      "line": positioned[t["id"]]["line"], "author": t["author_username"],
                      "created_at": iso(t["created_at"]), "excerpt": excerpt(t["body"]),
                      "resolvable": bool(t["resolvable"]), "resolved": bool(t["resolved"])} for t in firsts}


def history(workspace: Workspace, path: str, project: str | None = None, limit: int = 50) -> History:
    """The merge requests that touched `path` (a file, or every file under a directory), newest
    first, following renames back: an MR that renamed X to the path brings in the MRs on X before it."""
    if limit < 1:
        raise UsageError(f"history's limit must be at least 1, got {limit}")
    base = _clean_path(path)
    with workspace.read() as con:
        pid = project_id(con, project)
        hits: dict[int, dict[str, Any]] = {}
        renames: list[dict[str, Any]] = []
        root = _Target(base, True, pid, None, None)
        follow = [root]
        # The cycle guard: a path is followed once per project (A → B, then B → A again).
        seen: set[tuple[int, str]] = set()
        while follow:
            _touches(con, follow.pop(0), root, hits, follow, seen, renames)
        newest = sorted(hits, key=lambda mr_id: (hits[mr_id]["at"] or datetime.min, mr_id), reverse=True)[:limit]
        # The MRs, their links and their threads in a few queries for all of them, not per MR.
        found = {r["id"]: r for r in rows(con, """
            SELECT t.id, t.iid, t.title, t.state, t.web_url, t.project_id, t.merged_at, t.updated_at,
                   t.author_username, p.path_with_namespace AS project
            FROM merge_requests t JOIN projects p ON p.id = t.project_id WHERE t.id IN (SELECT unnest(?::BIGINT[]))""", [newest])}
        links = links_for(con, workspace.config, kinds.MERGE_REQUEST, [found[i] for i in newest if i in found])
        threads = _threads(con, {t: where for i in newest for t, where in hits[i]["threads"].items()})
        out = []
        for mr_id in newest:
            hit, mr = hits[mr_id], found[mr_id]
            files = list(hit["files"].values()) or [
                {"path": p, "old_path": None, "change": None} for p in sorted(hit.get("noted_paths", ()))]
            out.append({**public_item(kinds.MERGE_REQUEST, mr), "merged_at": iso(mr["merged_at"]),
                        "updated_at": iso(mr["updated_at"]), "author": mr["author_username"], "files": files,
                        "followed_rename": hit["rename"],
                        "closes": [{k: c[k] for k in ("reference", "title", "state", "url")} for c in links[mr_id]["closes"]],
                        "links": {g: [{k: c[k] for k in ("reference", "type", "title", "state", "url")} for c in group]
                                  for g, group in links[mr_id].items()},
                        "threads": [thread for t, thread in threads.items() if t in hit["threads"]]})
    return History(path=base, project=project, total=len(hits), renames=renames, merge_requests=out)
