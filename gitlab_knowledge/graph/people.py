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
from gitlab_knowledge.graph.mentioned import OPEN_STATES, mentions_of
from gitlab_knowledge.graph.person import person
from gitlab_knowledge.graph.queries import excerpt, iso, note_bodies, project_id, public_item, rows
from gitlab_knowledge.graph.roles import ROLES, entry, items_of, since, username
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
        found = items_of(con, u, pid, roles_only=True, open_or_since=start)
        assigned, assigned_mrs, reviewing, authored, states = _my_items(con, found, start)
        mentions, mentioned = mentions_of(con, name, pid, start, attention=True, limit=limit)
        notes, note_total = _changes(con, u, pid, start, limit)
    todos = None
    if live:
        from gitlab_knowledge.graph.todos import pending_todos

        todos = pending_todos(workspace, name if user is not None else None)
    lists = {"assigned_issues": _because(assigned, "assigned"), "assigned_mrs": _because(assigned_mrs, "assigned"),
             "review_requested": _because(reviewing, "review requested"),
             "authored_open_mrs": _because(authored, "authored"), "mentions": mentions}
    counts = {**{key: len(value) for key, value in lists.items()}, "mentions": mentioned, "todos": len(todos) if todos is not None else None,
              "notes": note_total, "state_changes": len(states)}
    cut = slice(None, limit)
    return Me(user=name, user_from="argument" if user is not None else "token", since=iso(start), project=project,
              counts=counts, **{key: value[cut] for key, value in lists.items()},
              todos=todos[cut] if todos is not None else None,
              changes=Changes(notes=notes, state_changes=states[cut]))


def _because(entries: list[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
    """Each entry with why it is in its group, as a person would say it."""
    return [{**e, "reason": reason} for e in entries]


def _my_items(con: duckdb.DuckDBPyConnection, mine: dict[kinds.Kind, list[dict[str, Any]]],
              start: datetime) -> tuple[list[dict[str, Any]], ...]:
    """`me`'s item lists, newest update first: the open issues assigned to the user, the open MRs
    assigned (not authored), to review and authored (with their unresolved threads), and the
    items closed or merged since `start`."""
    found = {kind: [r for r in items if r["state"] in OPEN_STATES or since(r["closed_at"], start)
                    or since(r["merged_at"], start)] for kind, items in mine.items()}

    def picked(kind: kinds.Kind, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [r for r in found[kind] if r["state"] in OPEN_STATES and keep(r)]

    def entries(kind: kinds.Kind, items: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
        return [entry(kind, {**{k: v for k, v in r.items() if k not in ROLES},
                              **{k: v[r["id"]] for k, v in extra.items()}}) for r in items]

    issues, mrs = kinds.ISSUE, kinds.MERGE_REQUEST
    # An MR's author is usually its assignee too (GitLab's habit): those are "authored".
    authored = picked(mrs, lambda r: r["is_author"])
    unresolved = dict(con.execute("""
        SELECT merge_request_id, count(*) FROM discussions
        WHERE merge_request_id IN (SELECT unnest(?::BIGINT[])) AND resolvable AND NOT COALESCE(resolved, false)
        GROUP BY ALL""", [[r["id"] for r in authored]]).fetchall()) if authored else {}
    states: list[dict[str, Any]] = []
    for kind, items in found.items():
        for r in items:
            if r["merged_at"] is not None and r["merged_at"] >= start:
                states.append({"item": public_item(kind, r), "change": "merged", "at": iso(r["merged_at"])})
            elif r["closed_at"] is not None and r["closed_at"] >= start:
                states.append({"item": public_item(kind, r), "change": "closed", "at": iso(r["closed_at"])})
    states.sort(key=lambda s: (s["at"] or "", s["item"]["reference"]), reverse=True)
    return (entries(issues, picked(issues, lambda r: r["is_assignee"])),
            entries(mrs, picked(mrs, lambda r: r["is_assignee"] and not r["is_author"])),
            entries(mrs, picked(mrs, lambda r: r["is_reviewer"])),
            entries(mrs, authored, unresolved_threads={r["id"]: unresolved.get(r["id"], 0) for r in authored}), states)


def _changes(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime,
             limit: int | None) -> tuple[list[dict[str, Any]], int]:
    """New notes by others on the user's items (those they authored, are assigned to or review)
    since `start`: the newest `limit`, and how many there are. Read from the notes kept per user
    (graph/people_rows.py `user_item_notes`): joining every note to the user's ~1,000 items cost
    ~10 ms at 100K documents."""
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    items = " UNION ALL ".join(f"SELECT '{k.name}' AS kind, id, iid, title, state, web_url, project_id FROM {k.table}"
                               for k in kinds.ITEM_KINDS)
    # The newest first and how many, without a body, with their items; then the bodies of those
    # shown only (a user's items can carry ten thousand notes since a day long ago, and an agent
    # is shown 100).
    found = rows(con, f"""
        SELECT n.note_id, n.author_username AS note_author, n.created_at AS note_at, n.item_type AS kind,
               n.item_id AS id, n.total, t.iid, t.title, t.state, t.web_url, p.path_with_namespace AS project
        FROM (SELECT *, count(*) OVER () AS total FROM user_item_notes WHERE username = ? AND created_at >= ?{scope}
              ORDER BY created_at DESC, note_id DESC{f' LIMIT {int(limit)}' if limit is not None else ''}) n
        JOIN ({items}) t ON t.kind = n.item_type AND t.id = n.item_id JOIN projects p ON p.id = t.project_id
        ORDER BY n.created_at DESC, n.note_id DESC""", [u, start, *scoped])
    bodies = note_bodies(con, [r["note_id"] for r in found])
    notes = [{"item": public_item(kinds.kind(r["kind"]), r), "note_id": r["note_id"], "author": r["note_author"],
              "created_at": iso(r["note_at"]), "excerpt": excerpt(bodies.get(r["note_id"])),
              "url": kinds.note_url(r['web_url'], r['note_id']) if r["web_url"] else None} for r in found]
    return notes, found[0]["total"] if found else 0
