"""People in the graph: `me` (what needs my attention); `person` (what someone works on) is in
graph/person.py and re-exported here.

The answers are typed records (graph/answers.py) whose `as_dict()` is the JSON document of
cli/schemas/me.json and person.json; graph/queries.py re-exports both functions. A user's items
and the notes others wrote on them are read from the graph's rows per user (graph/roles.py,
graph/people_rows.py), not found by testing every item and joining every note.
"""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import MissingUser
from gitlab_knowledge.graph.answers import Changes, Me
from gitlab_knowledge.graph.mentioned import OPEN_STATES, kept_mentions, mention_rows, picked
from gitlab_knowledge.graph.person import person
from gitlab_knowledge.graph.queries import excerpt, iso, note_bodies, project_id, public_item, rows
from gitlab_knowledge.graph.roles import ROLES, descending, entry, username
from gitlab_knowledge.timeutil import naive_utc, utcnow
from gitlab_knowledge.workspace import Workspace

__all__ = ["me", "person", "recorded_username"]

DEFAULT_SINCE = timedelta(days=7)


# -- me -----------------------------------------------------------------------------------------


def recorded_username(con: duckdb.DuckDBPyConnection, gitlab_url: str) -> str | None:
    """The token's user as last recorded for this GitLab (a user recorded for another URL may be
    someone else)."""
    row = con.execute("SELECT username FROM gitlab_identity WHERE gitlab_url = ?", [gitlab_url]).fetchone()
    return row[0] if row else None


def _whoami(con: duckdb.DuckDBPyConnection, gitlab_url: str) -> str:
    name = recorded_username(con, gitlab_url)
    if name is None:
        raise MissingUser()
    return name


def me(workspace: Workspace, user: str | None = None, since: datetime | None = None,
       project: str | None = None, live: bool = False, limit: int | None = None) -> Me:
    """What needs the user's attention (the token's user, as the last sync recorded it, unless
    named) and what changed on their items since `since` (default: the last 7 days). `live`: also
    the token's user's pending GitLab To-Dos, asked now (only for the token's own user). `limit`:
    at most that many entries per list, the newest (`counts` says how many there are)."""
    start = naive_utc(since) if since is not None else utcnow() - DEFAULT_SINCE
    with workspace.read() as con:
        pid = project_id(con, project)
        name = username(user) if user is not None else _whoami(con, workspace.config.gitlab.url)
        u = name.lower()
        found, kept = _mine(con, name, pid, start)
        lists, states = _my_items(con, found, start, limit)
        mentions, mentioned = picked(con, kept, name, limit)
        notes, note_total = _changes(con, u, pid, start, limit, found)
    todos = None
    if live:
        from gitlab_knowledge.graph.todos import pending_todos

        todos = pending_todos(workspace, name if user is not None else None)
    shown = {"assigned_issues": "assigned", "assigned_mrs": "assigned", "review_requested": "review requested",
             "authored_open_mrs": "authored"}
    counts = {**{key: lists[key][1] for key in shown}, "mentions": mentioned,
              "todos": len(todos) if todos is not None else None, "notes": note_total, "state_changes": len(states)}
    cut = slice(None, limit)
    return Me(user=name, user_from="argument" if user is not None else "token", since=iso(start), project=project,
              counts=counts, **{key: _because(lists[key][0], reason) for key, reason in shown.items()},
              mentions=mentions, todos=todos[cut] if todos is not None else None,
              changes=Changes(notes=notes, state_changes=[_state(kind, r, at, change) for kind, r, at, change
                                                          in _newest_changes(states, limit)]))


def _mine(con: duckdb.DuckDBPyConnection, user: str, pid: int | None,
          start: datetime) -> tuple[dict[kinds.Kind, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The user's items (`items_of` with `roles_only` and `open_or_since`: the open ones and those
    closed or merged since `start`, newest update first, with their roles) and the mentions of the
    user `me` keeps (graph/mentioned.py), with their items: in one query, which reads the items
    once for both (two queries each joining both kinds of item cost ~4 ms more at 100K
    documents). Only what `me` says of an item is read (each column costs its conversion)."""
    u = user.lower()
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    mentioned, mentioned_params = mention_rows(user, pid)
    kept, since = kept_mentions(start, attention=True, row="x.m_")
    blank = ", ".join(f"NULL AS m_{c}" for c in _MENTION_OWN)
    items = " UNION ALL ".join(
        f"SELECT '{k.name}' AS kind, id, iid, title, state, web_url, created_at, updated_at, closed_at, "
        f"{'merged_at' if k is kinds.MERGE_REQUEST else 'NULL::TIMESTAMP'} AS merged_at, project_id FROM {k.table}"
        for k in kinds.ITEM_KINDS)
    cur = con.execute(f"""
            WITH r AS (SELECT item_type, item_id, bool_or(role = 'author') AS is_author,
                              bool_or(role = 'assignee') AS is_assignee, bool_or(role = 'reviewer') AS is_reviewer
                       FROM user_items WHERE username = ?{scope} AND role <> 'commenter' GROUP BY ALL)
            SELECT x.*, t.kind, t.id, t.iid, t.title, t.state, t.web_url, t.created_at, t.updated_at, t.closed_at,
                   t.merged_at, p.path_with_namespace AS project
            FROM (SELECT true AS is_role, item_type, item_id, is_author, is_assignee, is_reviewer, {blank} FROM r
                  UNION ALL SELECT false, item_type, item_id, NULL, NULL, NULL, {', '.join(_MENTION)}
                  FROM ({mentioned})) x
            JOIN ({items}) t ON t.kind = x.item_type AND t.id = x.item_id JOIN projects p ON p.id = t.project_id
            WHERE CASE WHEN x.is_role THEN t.state IN {OPEN_STATES} OR t.closed_at >= ? OR t.merged_at >= ?
                       ELSE {kept} END
            ORDER BY t.updated_at DESC, t.id DESC""", [u, *scoped, *mentioned_params, start, start, *since])
    # Each row made into the one dict its use reads (made into a dict of its ~25 columns first, it
    # cost as much again).
    names = [d[0] for d in cur.description]
    role = [(k, names.index(k)) for k in _ITEM]
    mention = [(k, names.index(k)) for k in _MENTION_ITEM] + [(k, names.index("m_" + k)) for k in _MENTION_OWN]
    kind_at, is_role = names.index("kind"), names.index("is_role")
    found: dict[kinds.Kind, list[dict[str, Any]]] = {kind: [] for kind in kinds.ITEM_KINDS}
    by_name = {kind.name: found[kind] for kind in kinds.ITEM_KINDS}
    mentions = []
    for r in cur.fetchall():
        if r[is_role]:
            by_name[r[kind_at]].append({k: r[i] for k, i in role})
        else:
            mentions.append({k: r[i] for k, i in mention})
    return found, mentions


# What `me` says of an item (graph/roles.py `entry` drops ITEM_COLUMNS' other columns) and its roles.
_ITEM = ("id", "iid", "title", "state", "web_url", "created_at", "updated_at", "closed_at", "project", "merged_at",
         "is_author", "is_assignee", "is_reviewer")
# A kept mention's own columns (graph/mentioned.py `mention_rows`), named apart from its item's
# in the query, and what `picked` reads of its item.
_MENTION_OWN = ("note_id", "discussion_id", "found_in", "author", "excerpt", "created_at", "resolved", "resolvable")
_MENTION = tuple(f"{c} AS m_{c}" for c in _MENTION_OWN)
_MENTION_ITEM = ("item_type", "item_id", "kind", "iid", "title", "state", "web_url", "project")


def _because(entries: list[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
    """Each entry with why it is in its group, as a person would say it."""
    return [{**e, "reason": reason} for e in entries]


def _my_items(con: duckdb.DuckDBPyConnection, mine: dict[kinds.Kind, list[dict[str, Any]]], start: datetime,
              limit: int | None) -> tuple[dict[str, tuple[list[dict[str, Any]], int]],
                                          list[tuple[kinds.Kind, dict[str, Any], datetime, str]]]:
    """`me`'s item lists, newest update first: the open issues assigned to the user, the open MRs
    assigned (not authored), to review and authored (with their unresolved threads), each whole
    (`counts`) with entries for the first `limit` only (made into entries, a user's ~1,000 items
    cost more than reading them) and how many; and the items closed or merged since `start`, with when and how."""
    def picked(kind: kinds.Kind, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [r for r in mine[kind] if r["state"] in OPEN_STATES and keep(r)]

    def entries(kind: kinds.Kind, items: list[dict[str, Any]], **extra: Any) -> tuple[list[dict[str, Any]], int]:
        return [entry(kind, {**{k: v for k, v in r.items() if k not in ROLES},
                             **{k: v[r["id"]] for k, v in extra.items()}}) for r in items[cut]], len(items)

    cut = slice(None, limit)
    issues, mrs = kinds.ISSUE, kinds.MERGE_REQUEST
    # An MR's author is usually its assignee too (GitLab's habit): those are "authored".
    authored = picked(mrs, lambda r: r["is_author"])
    unresolved = dict(con.execute("""
        SELECT merge_request_id, count(*) FROM discussions
        WHERE merge_request_id IN (SELECT unnest(?::BIGINT[])) AND resolvable AND NOT COALESCE(resolved, false)
        GROUP BY ALL""", [[r["id"] for r in authored[cut]]]).fetchall()) if authored else {}
    states: list[tuple[kinds.Kind, dict[str, Any], datetime, str]] = []
    for kind, items in mine.items():
        for r in items:
            if r["merged_at"] is not None and r["merged_at"] >= start:
                states.append((kind, r, r["merged_at"], "merged"))
            elif r["closed_at"] is not None and r["closed_at"] >= start:
                states.append((kind, r, r["closed_at"], "closed"))
    return {"assigned_issues": entries(issues, picked(issues, lambda r: r["is_assignee"])),
            "assigned_mrs": entries(mrs, picked(mrs, lambda r: r["is_assignee"] and not r["is_author"])),
            "review_requested": entries(mrs, picked(mrs, lambda r: r["is_reviewer"])),
            "authored_open_mrs": entries(mrs, authored, unresolved_threads={r["id"]: unresolved.get(r["id"], 0)
                                                                            for r in authored[cut]})}, states


def _newest_changes(states: list[tuple[kinds.Kind, dict[str, Any], datetime, str]],
                    limit: int | None) -> list[tuple[kinds.Kind, dict[str, Any], datetime, str]]:
    """The first `limit` state changes as the answer orders them: by the ISO text of when, then
    reference, descending. Sorted by time first, only those within the second of the `limit`-th
    can change places by the text (graph/roles.py `newest`), so only those are made into text."""
    by_time = sorted(states, key=lambda s: descending(s[2]))
    if limit is not None and len(by_time) > limit:
        floor = by_time[limit - 1][2].replace(microsecond=0)
        by_time = [s for s in by_time if s[2] >= floor]
    return sorted(by_time, key=lambda s: (iso(s[2]) or "", s[0].ref(s[1]["iid"], s[1]["project"])),
                  reverse=True)[:limit]


def _state(kind: kinds.Kind, r: dict[str, Any], at: datetime, change: str) -> dict[str, Any]:
    return {"item": public_item(kind, r), "change": change, "at": iso(at)}


def _changes(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime, limit: int | None,
             mine: dict[kinds.Kind, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], int]:
    """New notes by others on the user's items (those they authored, are assigned to or review)
    since `start`: the newest `limit`, and how many there are. Read from the notes kept per user
    (graph/people_rows.py `user_item_notes`): joining every note to the user's ~1,000 items cost
    ~10 ms at 100K documents. Their items are those `me` read already (`mine`: the open ones and
    those closed or merged since `start`); only an item closed before is read here."""
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    # The newest first and how many, without a body; then the bodies of those shown only (a
    # user's items can carry ten thousand notes since a day long ago, and an agent is shown 100).
    found = rows(con, f"""
        SELECT note_id, author_username AS note_author, created_at AS note_at, item_type AS kind, item_id AS id,
               count(*) OVER () AS total
        FROM user_item_notes WHERE username = ? AND created_at >= ?{scope}
        ORDER BY created_at DESC, note_id DESC{f' LIMIT {int(limit)}' if limit is not None else ''}""",
                 [u, start, *scoped])
    items = {(kind.name, r["id"]): r for kind, rs in mine.items() for r in rs}
    items.update(_items(con, {(r["kind"], r["id"]) for r in found} - items.keys()))
    # An item the lens hides, or gone since, is left out as a join with the items would.
    shown = [(r, items[(r["kind"], r["id"])]) for r in found if (r["kind"], r["id"]) in items]
    bodies = note_bodies(con, [r["note_id"] for r, _ in shown])
    notes = [{"item": public_item(kinds.kind(r["kind"]), t), "note_id": r["note_id"], "author": r["note_author"],
              "created_at": iso(r["note_at"]), "excerpt": excerpt(bodies.get(r["note_id"])),
              "url": kinds.note_url(t['web_url'], r['note_id']) if t["web_url"] else None} for r, t in shown]
    return notes, found[0]["total"] if found else 0


def _items(con: duckdb.DuckDBPyConnection, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The stored items (kind name, id) as `public_item` shows them."""
    parts = [(f"SELECT '{k.name}' AS kind, t.id, t.iid, t.title, t.state, t.web_url, p.path_with_namespace AS project "
              f"FROM {k.table} t JOIN projects p ON p.id = t.project_id WHERE t.id IN (SELECT unnest(?::BIGINT[]))",
              [i for kind, i in wanted if kind == k.name]) for k in kinds.ITEM_KINDS]
    parts = [(sql, ids) for sql, ids in parts if ids]
    if not parts:
        return {}
    return {(r["kind"], r["id"]): r for r in rows(con, " UNION ALL ".join(sql for sql, _ in parts),
                                                 [ids for _, ids in parts])}
