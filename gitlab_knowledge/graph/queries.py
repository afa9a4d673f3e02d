"""Questions the knowledge graph answers: what an item links to (which MRs touched a file:
graph/history.py, who did what: graph/people.py).

`related`, `history`, `me` and `person` answer what the CLI commands of the same names print and
the MCP tools return: each a typed record (graph/answers.py) whose `as_dict()` is the --json
document (timestamps as ISO 8601 strings), validated by cli/schemas/<name>.json. They read the
store only.
"""

import re
from datetime import datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.explain import NoteNotStored, resolve
from gitlab_knowledge.graph.answers import Related
from gitlab_knowledge.graph.refs import INVERSE
from gitlab_knowledge.store.queries import check_project, project_paths
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
# What a link says of the stored item on its other side (`public_item`) and what keys it: the
# rows of every iid linked, in every project, are read, and each column costs their conversion.
# (The project's path comes from `project_paths`: joined with `projects`, the read cost ~1 ms more.)
_LINKED_COLUMNS = "t.id, t.iid, t.title, t.state, t.web_url, t.project_id"


def iso(value: Any) -> str | None:
    """A stored (naive UTC) timestamp as the JSON documents write it: `2024-03-15T09:12:44Z`."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        # What the stored (naive UTC) ones are: the same text without a UTC copy (an answer
        # writes hundreds of these; the copy made a third of their cost).
        return value.isoformat() + "Z"
    return value.isoformat().replace("+00:00", "Z")


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The text on one line, cut at `limit` characters with an ellipsis."""
    flat = re.sub(r"\s+", " ", text or "").strip()
    return flat if len(flat) <= limit else flat[:limit - 1].rstrip() + "…"


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def note_bodies(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, str | None]:
    """The bodies of a few notes (the ones an answer shows), by id. Matched in the scan with a
    list (a semi-join with the ids cost ~2 ms more at 100K documents)."""
    if not ids:
        return {}
    return dict(con.execute("SELECT id, body FROM notes WHERE list_contains(?::BIGINT[], id)", [ids]).fetchall())


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
             item: dict[str, Any], paths: dict[int, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The item's links, grouped, each other item once per group."""
    return links_for(con, config, kind, [item], paths)[item["id"]]


def links_for(con: duckdb.DuckDBPyConnection, config: Config, kind: kinds.Kind,
              items: list[dict[str, Any]], paths: dict[int, str] | None = None) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """`links_of` for each of several items of one kind, by item id, read in two queries for all
    of them: both directions of their links in one scan, and the stored items on the links' other
    side (a query per link cost ~1.5 ms at 100K documents, and an MR links a dozen items; a query
    per direction and per kind, ~2-3 ms each; each reference to a lens's view ~1 ms). `paths`:
    `project_paths` of `con` (read when not given)."""
    out: dict[int, dict[str, dict[tuple[str, str], dict[str, Any]]]] = {i["id"]: {g: {} for g in GROUPS} for i in items}
    if not items:
        return {}
    if paths is None:
        paths = project_paths(None, con)
    # A row may be both (an item naming its own iid): it counts in each direction, as the two
    # scans of each direction read it.
    found = rows(con, """
        SELECT source_type = ? AND list_contains(?::BIGINT[], source_id) AS outgoing,
               target_type = ? AND list_contains(?::BIGINT[], target_iid) AS incoming,
               source_type, source_id, kind, found_in, target_type, target_path, target_iid, target_project_id, external
        FROM item_references
        WHERE (source_type = ? AND list_contains(?::BIGINT[], source_id))
           OR (target_type = ? AND list_contains(?::BIGINT[], target_iid))""",
                 [kind.name, [i["id"] for i in items], kind.name, sorted({i["iid"] for i in items})] * 2)
    outgoing = [r for r in found if r["outgoing"]]
    incoming = [r for r in found if r["incoming"]]
    # A link not resolved when it was read names its project by path: it may have been synced since.
    id_of_path: dict[str, int] = {}
    if any(r["target_project_id"] is None for r in outgoing):
        for pid in sorted(paths, reverse=True):  # the lowest id of a path in two cases
            id_of_path[paths[pid].lower()] = pid
    for r in outgoing:
        r["pid"] = r["target_project_id"] if r["target_project_id"] is not None else id_of_path.get(r["target_path"].lower())
    by_key, by_id = _items_keyed(con, paths, {(r["target_type"], r["pid"], r["target_iid"]) for r in outgoing if r["pid"] is not None},
                                 {(r["source_type"], r["source_id"]) for r in incoming})
    for r in outgoing:
        target_kind = kinds.kind(r["target_type"])
        other = by_key.get((r["target_type"], r["pid"], r["target_iid"]))
        if other is not None and other["id"] == r["source_id"] and target_kind is kind:
            continue  # an item naming itself links nothing
        if other is not None:
            link = {**public_item(target_kind, other), "external": bool(r["external"]), "in_store": True}
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


def _items_keyed(con: duckdb.DuckDBPyConnection, paths: dict[int, str], keys: set[tuple[str, int, int]],
                 ids: set[tuple[str, int]]
                 ) -> tuple[dict[tuple[str, int, int], dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]:
    """Stored items by (kind name, project id, iid) and by (kind name, id), in one query for both
    kinds: the rows of those iids or ids (a few more than asked: an iid is one per project), kept
    where they match, of the projects `paths` holds (as a join with `projects` keeps them)."""
    wanted = [(k, sorted({iid for name, _, iid in keys if name == k.name}), sorted(i for name, i in ids if name == k.name))
              for k in kinds.ITEM_KINDS]
    wanted = [w for w in wanted if w[1] or w[2]]
    by_key: dict[tuple[str, int, int], dict[str, Any]] = {}
    by_id: dict[tuple[str, int], dict[str, Any]] = {}
    if not wanted:
        return by_key, by_id
    found = rows(con, " UNION ALL ".join(
        f"SELECT '{k.name}' AS kind_name, {_LINKED_COLUMNS} FROM {k.table} t "
        "WHERE list_contains(?::BIGINT[], t.iid) OR list_contains(?::BIGINT[], t.id)" for k, _, _ in wanted),
                 [p for _, iids, item_ids in wanted for p in (iids, item_ids)])
    for r in found:
        if r["project_id"] not in paths:
            continue
        name = r.pop("kind_name")
        r["project"] = paths[r["project_id"]]
        if (name, r["project_id"], r["iid"]) in keys:
            by_key[(name, r["project_id"], r["iid"])] = r
        if (name, r["id"]) in ids:
            by_id[(name, r["id"])] = r
    return by_key, by_id


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
        links = links_of(con, workspace.config, kind, item, project_paths(workspace, con))
    return Related(item=public_item(kind, item), links=links)
