"""People in the graph: `me` (what needs my attention); `person` (what someone works on) is in
graph/person.py and re-exported here.

The answers are typed records (graph/answers.py) whose `as_dict()` is the JSON document of
cli/schemas/me.json and person.json; graph/queries.py re-exports both functions. A user's items
and the notes others wrote on them are read from the graph's rows per user (graph/roles.py,
graph/people_rows.py), not found by testing every item and joining every note.
"""

from datetime import datetime, timedelta
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import MissingUser
from gitlab_knowledge.graph.answers import Changes, Me
from gitlab_knowledge.graph.mentioned import OPEN_STATES, kept_mentions, mention_rows, picked
from gitlab_knowledge.graph.person import person
from gitlab_knowledge.graph.queries import excerpt, iso, note_bodies, project_id, public_item, rows
from gitlab_knowledge.graph.roles import descending, username
from gitlab_knowledge.store.alongside import read_alongside
from gitlab_knowledge.store.queries import project_paths
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
        # The new notes (with their bodies) need nothing of `_mine`'s: read on another connection
        # meanwhile, as DuckDB runs both at once (on 2 cores, the call takes the longer of the
        # two instead of their sum).
        with read_alongside(con, lambda other: _new_notes(other, u, pid, start, limit)) as later:
            paths = project_paths(workspace, con)
            mine, kept = _mine(con, name, pid, start, paths)
            mentions, mentioned = picked(con, kept, name, limit)  # while the notes may still be read
            found, note_total, bodies = later.result()
        lists, states = _my_items(mine, start, limit, paths)
        notes = _changes(con, found, bodies, mine, paths)
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
              counts=counts, **{key: [{**e, "reason": reason} for e in lists[key][0]] for key, reason in shown.items()},
              mentions=mentions, todos=todos[cut] if todos is not None else None,
              changes=Changes(notes=notes, state_changes=[_state(kind, r, at, change, paths) for kind, r, at, change
                                                          in _newest_changes(states, limit, paths)]))


# What `_mine` reads of an item and its roles (a role row) or of a kept mention and its item: one
# list of columns for both (`created_at` is the mention's, for a mention), in this order.
_COLUMNS = ("is_role", "kind", "item_id", "iid", "title", "state", "web_url", "project", "created_at", "updated_at",
            "closed_at", "merged_at", "is_author", "is_assignee", "is_reviewer", "unresolved", "note_id",
            "discussion_id", "found_in", "author", "excerpt", "resolved")
(_IS_ROLE, _KIND, _ID, _IID, _TITLE, _STATE, _WEB_URL, _PROJECT, _CREATED, _UPDATED, _CLOSED, _MERGED, _AUTHOR,
 _ASSIGNEE, _REVIEWER, _UNRESOLVED) = range(16)
# A mention's own columns (graph/mentioned.py `mention_rows`), named apart from its item's in the query.
_MENTION_OWN = ("note_id", "discussion_id", "found_in", "author", "excerpt", "created_at", "resolved", "resolvable")
# A row of one of the user's items: a tuple of `_COLUMNS`, read by index (made into dicts, the
# ~600 rows of a user's items cost ~2 ms at 100K documents, to show a hundred). `project` is the
# project's id: its path is looked up (`project_paths`) for the entries shown only, as joining
# `projects` in the query cost ~0.8 ms at 100K documents.
Row = tuple[Any, ...]


def _mine(con: duckdb.DuckDBPyConnection, user: str, pid: int | None, start: datetime,
          paths: dict[int, str]) -> tuple[dict[kinds.Kind, list[Row]], list[dict[str, Any]]]:
    """The user's items (the open ones and those closed or merged since `start`, newest update
    first, with their roles and, an MR they authored, its unresolved threads: `Row`s) and the
    mentions of the user `me` keeps (graph/mentioned.py), with their items: in one query, which
    reads the items once for both (two queries each joining both kinds of item cost ~4 ms more at
    100K documents) and counts the threads of the authored MRs it found (a statement of its own
    cost ~3 ms more, planning and reading the user's rows again). Only what `me` says of an item
    is read (each column costs its conversion). `paths`: `project_paths` of `con`; an item of a
    project not among them is left out, as a join with `projects` would."""
    u = user.lower()
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    mentioned, mentioned_params = mention_rows(user, pid)
    kept, since = kept_mentions(start, attention=True, row="x.m_")
    blank = ", ".join(f"NULL AS m_{c}" for c in _MENTION_OWN)
    mr = kinds.MERGE_REQUEST.name
    items = " UNION ALL ".join(
        f"SELECT '{k.name}' AS kind, id, iid, title, state, web_url, created_at, updated_at, closed_at, "
        f"{'merged_at' if k is kinds.MERGE_REQUEST else 'NULL::TIMESTAMP'} AS merged_at, project_id FROM {k.table}"
        for k in kinds.ITEM_KINDS)
    cur = con.execute(f"""
            WITH r AS (SELECT item_type, item_id, bool_or(role = 'author') AS is_author,
                              bool_or(role = 'assignee') AS is_assignee, bool_or(role = 'reviewer') AS is_reviewer
                       FROM user_items WHERE username = ?{scope} AND role <> 'commenter' GROUP BY ALL),
                 u AS (SELECT merge_request_id, count(*) AS unresolved FROM discussions
                       WHERE merge_request_id IN (SELECT item_id FROM r WHERE is_author AND item_type = '{mr}')
                         AND resolvable AND NOT COALESCE(resolved, false) GROUP BY ALL)
            SELECT x.is_role, t.kind, t.id, t.iid, t.title, t.state, t.web_url, t.project_id,
                   CASE WHEN x.is_role THEN t.created_at ELSE x.m_created_at END, t.updated_at, t.closed_at,
                   t.merged_at, x.is_author, x.is_assignee, x.is_reviewer, x.unresolved, x.m_note_id,
                   x.m_discussion_id, x.m_found_in, x.m_author, x.m_excerpt, x.m_resolved
            FROM (SELECT true AS is_role, item_type, item_id, is_author, is_assignee, is_reviewer,
                         CASE WHEN is_author AND item_type = '{mr}' THEN coalesce(u.unresolved, 0) END AS unresolved,
                         {blank}
                  FROM r LEFT JOIN u ON r.item_type = '{mr}' AND u.merge_request_id = r.item_id
                  UNION ALL SELECT false, item_type, item_id, NULL, NULL, NULL, NULL,
                                   {', '.join(f'{c} AS m_{c}' for c in _MENTION_OWN)}
                  FROM ({mentioned})) x
            JOIN ({items}) t ON t.kind = x.item_type AND t.id = x.item_id
            WHERE CASE WHEN x.is_role THEN t.state IN {OPEN_STATES} OR t.closed_at >= ? OR t.merged_at >= ?
                       ELSE {kept} END
            ORDER BY t.updated_at DESC, t.id DESC""", [u, *scoped, *mentioned_params, start, start, *since])
    found: dict[kinds.Kind, list[Row]] = {kind: [] for kind in kinds.ITEM_KINDS}
    by_name = {kind.name: found[kind] for kind in kinds.ITEM_KINDS}
    mentions = []
    for r in cur.fetchall():
        if r[_PROJECT] not in paths:
            continue
        if r[_IS_ROLE]:
            by_name[r[_KIND]].append(r)
        else:
            # What graph/mentioned.py `picked` reads of a kept mention and its item.
            mention = dict(zip(_COLUMNS, r, strict=True))
            mention["item_type"], mention["project"] = r[_KIND], paths[r[_PROJECT]]
            mentions.append(mention)
    return found, mentions


def _item(r: Row, paths: dict[int, str]) -> dict[str, Any]:
    """What `public_item` reads of an item's row."""
    return {"iid": r[_IID], "title": r[_TITLE], "state": r[_STATE], "web_url": r[_WEB_URL], "project": paths[r[_PROJECT]]}


def _entry(kind: kinds.Kind, r: Row, paths: dict[int, str], **extra: Any) -> dict[str, Any]:
    """An item of `me`'s lists as graph/roles.py `entry` makes one, with `extra` after it."""
    return {**public_item(kind, _item(r, paths)), "created_at": iso(r[_CREATED]), "updated_at": iso(r[_UPDATED]),
            **extra}


def _my_items(mine: dict[kinds.Kind, list[Row]], start: datetime, limit: int | None,
              paths: dict[int, str]) -> tuple[dict[str, tuple[list[dict[str, Any]], int]],
                                          list[tuple[kinds.Kind, Row, datetime, str]]]:
    """`me`'s item lists, newest update first: the open issues assigned to the user, the open MRs
    assigned (not authored), to review and authored (with their unresolved threads), each whole
    (`counts`) with entries for the first `limit` only (made into entries, a user's ~1,000 items
    cost more than reading them) and how many; and the items closed or merged since `start`, with
    when and how."""
    cut = slice(None, limit)
    issues, mrs = kinds.ISSUE, kinds.MERGE_REQUEST
    open_issues = [r for r in mine[issues] if r[_STATE] in OPEN_STATES]
    open_mrs = [r for r in mine[mrs] if r[_STATE] in OPEN_STATES]
    # An MR's author is usually its assignee too (GitLab's habit): those are "authored".
    picked = {"assigned_issues": (issues, [r for r in open_issues if r[_ASSIGNEE]]),
              "assigned_mrs": (mrs, [r for r in open_mrs if r[_ASSIGNEE] and not r[_AUTHOR]]),
              "review_requested": (mrs, [r for r in open_mrs if r[_REVIEWER]]),
              "authored_open_mrs": (mrs, [r for r in open_mrs if r[_AUTHOR]])}
    lists = {key: ([_entry(kind, r, paths) for r in items[cut]], len(items)) for key, (kind, items) in picked.items()}
    lists["authored_open_mrs"] = ([_entry(mrs, r, paths, unresolved_threads=r[_UNRESOLVED])
                                   for r in picked["authored_open_mrs"][1][cut]], lists["authored_open_mrs"][1])
    states: list[tuple[kinds.Kind, Row, datetime, str]] = []
    for kind, items in mine.items():
        for r in items:
            if r[_MERGED] is not None and r[_MERGED] >= start:
                states.append((kind, r, r[_MERGED], "merged"))
            elif r[_CLOSED] is not None and r[_CLOSED] >= start:
                states.append((kind, r, r[_CLOSED], "closed"))
    return lists, states


def _newest_changes(states: list[tuple[kinds.Kind, Row, datetime, str]], limit: int | None,
                    paths: dict[int, str]) -> list[tuple[kinds.Kind, Row, datetime, str]]:
    """The first `limit` state changes as the answer orders them: by the ISO text of when, then
    reference, descending. Sorted by time first, only those within the second of the `limit`-th
    can change places by the text (graph/roles.py `newest`), so only those are made into text."""
    by_time = sorted(states, key=lambda s: descending(s[2]))
    if limit is not None and len(by_time) > limit:
        floor = by_time[limit - 1][2].replace(microsecond=0)
        by_time = [s for s in by_time if s[2] >= floor]
    return sorted(by_time, key=lambda s: (iso(s[2]) or "", s[0].ref(s[1][_IID], paths[s[1][_PROJECT]])),
                  reverse=True)[:limit]


def _state(kind: kinds.Kind, r: Row, at: datetime, change: str, paths: dict[int, str]) -> dict[str, Any]:
    return {"item": public_item(kind, _item(r, paths)), "change": change, "at": iso(at)}


def _new_notes(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime,
               limit: int | None) -> tuple[list[dict[str, Any]], int, dict[int, str | None]]:
    """New notes by others on the user's items (those they authored, are assigned to or review)
    since `start`: the newest `limit`, how many there are and the bodies of those, read from the
    notes kept per user (graph/people_rows.py `user_item_notes`: joining every note to the user's
    ~1,000 items cost ~10 ms at 100K documents)."""
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    # The newest first and how many, without a body; then the bodies of those shown only (a
    # user's items can carry ten thousand notes since a day long ago, and an agent is shown 100).
    found = rows(con, f"""
        SELECT note_id, author_username AS note_author, created_at AS note_at, item_type AS kind, item_id AS id,
               count(*) OVER () AS total
        FROM user_item_notes WHERE username = ? AND created_at >= ?{scope}
        ORDER BY created_at DESC, note_id DESC{f' LIMIT {int(limit)}' if limit is not None else ''}""",
                 [u, start, *scoped])
    bodies = note_bodies(con, [r["note_id"] for r in found])
    return found, found[0]["total"] if found else 0, bodies


def _changes(con: duckdb.DuckDBPyConnection, found: list[dict[str, Any]], bodies: dict[int, str | None],
             mine: dict[kinds.Kind, list[Row]], paths: dict[int, str]) -> list[dict[str, Any]]:
    """The entries of the new notes `found` (`_new_notes`). Their items are those `me` read
    already (`mine`: the open ones and those closed or merged since `start`); only an item closed
    before is read here."""
    wanted = {(r["kind"], r["id"]) for r in found}
    items = {(kind.name, r[_ID]): _item(r, paths) for kind, rs in mine.items() for r in rs
             if (kind.name, r[_ID]) in wanted}
    items.update(_items(con, wanted - items.keys()))
    # An item the lens hides, or gone since, is left out as a join with the items would.
    return [{"item": public_item(kinds.kind(r["kind"]), t), "note_id": r["note_id"], "author": r["note_author"],
             "created_at": iso(r["note_at"]), "excerpt": excerpt(bodies.get(r["note_id"])),
             "url": kinds.note_url(t["web_url"], r["note_id"]) if t["web_url"] else None}
            for r in found if (t := items.get((r["kind"], r["id"]))) is not None]


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
