"""People in the graph: `me` (what needs my attention) and `person` (what someone works on).

Usernames compare without case, as GitLab's do. The answers are typed records (graph/answers.py)
whose `as_dict()` is the JSON document of cli/schemas/me.json and person.json; graph/queries.py
re-exports both functions.
"""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import MissingUser, UsageError
from gitlab_knowledge.graph.answers import Changes, Me, Person
from gitlab_knowledge.timeutil import naive_utc, utcnow
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.support.graph_before.mentioned import OPEN_STATES, mentions_of
from gitlab_knowledge_tests.support.graph_before.queries import (
    ITEM_COLUMNS,
    excerpt,
    iso,
    project_id,
    public_item,
    rows,
)

DEFAULT_SINCE = timedelta(days=7)
TOP = 10  # labels and paths `person` lists
# The columns ITEM_COLUMNS names: what an entry says is chosen; any other column is an extra.
_ITEM_KEYS = {c.split(" AS ")[-1].split(".")[-1] for c in ITEM_COLUMNS.split(", ")}


def _in(column: str) -> str:
    """`column` (a TEXT[] of usernames) holds the user (the lowered username is the parameter)."""
    return f"COALESCE(list_contains(list_transform({column}, lambda x: lower(x)), ?), false)"


def _is(column: str) -> str:
    return f"lower(COALESCE({column}, '')) = ?"


def _username(user: str) -> str:
    name = user.strip().removeprefix("@").strip()
    if not name or any(c.isspace() for c in name):
        raise UsageError(f"expected a GitLab username such as janedoe, got {user!r}")
    return name


def _entries(con: duckdb.DuckDBPyConnection, kind: kinds.Kind, where: str, params: list[Any],
             pid: int | None, order: str = "t.updated_at DESC, t.id DESC", extra: str = "") -> list[dict[str, Any]]:
    """Stored items of a kind as answers list them, with any `extra` columns kept as they are."""
    scope = " AND t.project_id = ?" if pid is not None else ""
    found = rows(con, f"SELECT {ITEM_COLUMNS}{extra} FROM {kind.table} t JOIN projects p ON p.id = t.project_id "
                      f"WHERE ({where}){scope} ORDER BY {order}", [*params, *([pid] if pid is not None else [])])
    return [_entry(kind, r) for r in found]


def _entry(kind: kinds.Kind, row: dict[str, Any]) -> dict[str, Any]:
    entry = {**public_item(kind, row), "created_at": iso(row["created_at"]), "updated_at": iso(row["updated_at"])}
    for key, value in row.items():
        if key not in _ITEM_KEYS and key not in entry:
            entry[key] = iso(value) if isinstance(value, datetime) else value
    return entry


def _item_of(kind: kinds.Kind) -> str:
    """SQL joining a note `n` to its item `t` and project `p` of this kind."""
    return (f"notes n JOIN {kind.table} t ON n.noteable_type = '{kind.noteable_type}' AND t.id = n.noteable_id "
            "JOIN projects p ON p.id = t.project_id")


# -- me -----------------------------------------------------------------------------------------


def recorded_username(con: duckdb.DuckDBPyConnection, gitlab_url: str) -> str | None:
    """The token's user as last recorded for this GitLab (a user recorded for another URL may be
    someone else)."""
    row = con.execute("SELECT username FROM gitlab_identity WHERE gitlab_url = ?", [gitlab_url]).fetchone()
    return row[0] if row else None


def _whoami(con: duckdb.DuckDBPyConnection, gitlab_url: str) -> str:
    username = recorded_username(con, gitlab_url)
    if username is None:
        raise MissingUser()
    return username


def me(workspace: Workspace, user: str | None = None, since: datetime | None = None,
       project: str | None = None, live: bool = False, limit: int | None = None) -> Me:
    """What needs the user's attention (the token's user, as the last sync recorded it, unless
    named) and what changed on their items since `since` (default: the last 7 days). `live`: also
    the token's user's pending GitLab To-Dos, asked now (only for the token's own user). `limit`:
    at most that many entries per list, the newest (`counts` says how many there are)."""
    start = naive_utc(since) if since is not None else utcnow() - DEFAULT_SINCE
    with workspace.read() as con:
        pid = project_id(con, project)
        name = _username(user) if user is not None else _whoami(con, workspace.config.gitlab.url)
        u = name.lower()
        assigned, assigned_mrs, reviewing, authored, states = _my_items(con, u, pid, start)
        mentions, mentioned = mentions_of(con, name, pid, start, attention=True, limit=limit)
        notes, note_total = _changes(con, u, start, pid, limit)
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


def _mine(kind: kinds.Kind) -> str:
    """The user authored the item, is assigned to it or (an MR) reviews it."""
    roles = [_is("t.author_username"), _in("t.assignees")]
    if kind is kinds.MERGE_REQUEST:
        roles.append(_in("t.reviewers"))
    return "(" + " OR ".join(roles) + ")"


_ROLES = ("is_author", "is_assignee", "is_reviewer", "merged_at")


def _my_items(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime) -> tuple[list[dict[str, Any]], ...]:
    """`me`'s item lists, newest update first, from one read of each kind: the open issues assigned
    to the user, the open MRs assigned (not authored), to review and authored (with their
    unresolved threads), and the items closed or merged since `start`."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    found: dict[kinds.Kind, list[dict[str, Any]]] = {}
    for kind in kinds.ITEM_KINDS:
        mr = kind is kinds.MERGE_REQUEST
        merged = "t.merged_at" if mr else "NULL::TIMESTAMP"
        found[kind] = rows(con, f"""
            SELECT {ITEM_COLUMNS}, {merged} AS merged_at, {_is('t.author_username')} AS is_author,
                   {_in('t.assignees')} AS is_assignee, {_in('t.reviewers') if mr else 'false'} AS is_reviewer
            FROM {kind.table} t JOIN projects p ON p.id = t.project_id
            WHERE {_mine(kind)} AND (t.state IN {OPEN_STATES} OR t.closed_at >= ? OR {merged} >= ?){scope}
            ORDER BY t.updated_at DESC, t.id DESC""", [u, u, *([u] if mr else []), *[u] * _mine(kind).count("?"),
                                                       start, start, *scoped])

    def picked(kind: kinds.Kind, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [r for r in found[kind] if r["state"] in OPEN_STATES and keep(r)]

    def entries(kind: kinds.Kind, items: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
        return [_entry(kind, {**{k: v for k, v in r.items() if k not in _ROLES},
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


def _changes(con: duckdb.DuckDBPyConnection, u: str, start: datetime, pid: int | None,
             limit: int | None) -> tuple[list[dict[str, Any]], int]:
    """New notes by others on the user's items since `start`: the newest `limit`, and how many
    there are."""
    scope = " AND t.project_id = ?" if pid is not None else ""
    scoped = [pid] if pid is not None else []
    mine = " UNION ALL ".join(
        f"SELECT '{k.noteable_type}' AS noteable_type, '{k.name}' AS kind, t.id, t.iid, t.title, t.state, t.web_url, "
        f"p.path_with_namespace AS project FROM {k.table} t JOIN projects p ON p.id = t.project_id "
        f"WHERE {_mine(k)}{scope}" for k in kinds.ITEM_KINDS)
    mine_params = [p for k in kinds.ITEM_KINDS for p in ([u] * _mine(k).count("?") + scoped)]
    # The newest first and how many, without a body; then the bodies of those shown only (a
    # user's items can carry ten thousand notes since a day long ago, and an agent is shown 100).
    found = rows(con, f"""
        WITH mine AS ({mine})
        SELECT n.id AS note_id, n.author_username AS note_author, n.created_at AS note_at, mine.*,
               count(*) OVER () AS total
        FROM notes n JOIN mine ON n.noteable_type = mine.noteable_type AND n.noteable_id = mine.id
        WHERE n.created_at >= ? AND NOT {_is('n.author_username')}
        ORDER BY n.created_at DESC, n.id DESC{f' LIMIT {int(limit)}' if limit is not None else ''}""",
                 [*mine_params, start, u])
    bodies = dict(con.execute("SELECT id, body FROM notes WHERE id IN (SELECT unnest(?::BIGINT[]))",
                              [[r["note_id"] for r in found]]).fetchall()) if found else {}
    notes = [{"item": public_item(kinds.kind(r["kind"]), r), "note_id": r["note_id"], "author": r["note_author"],
              "created_at": iso(r["note_at"]), "excerpt": excerpt(bodies.get(r["note_id"])),
              "url": kinds.note_url(r['web_url'], r['note_id']) if r["web_url"] else None} for r in found]
    return notes, found[0]["total"] if found else 0


# -- person -------------------------------------------------------------------------------------


def _known(con: duckdb.DuckDBPyConnection, u: str, pid: int | None) -> str | None:
    """The user's display name if they appear anywhere in scope ("" without one), else None."""
    scope = " AND project_id = ?" if pid is not None else ""
    scoped = [pid] if pid is not None else []
    authors = (*(k.table for k in kinds.ITEM_KINDS), "notes")
    written = " UNION ALL ".join(f"SELECT author_name, author_username FROM {t} WHERE true{scope}" for t in authors)
    named = con.execute(f"""
        SELECT author_name FROM ({written})
        WHERE {_is('author_username')} ORDER BY author_name IS NULL LIMIT 1""", [*scoped * len(authors), u]).fetchone()
    if named is not None:
        return named[0] or ""
    # Named in an item's people lists (assignees, an MR's reviewers) without having written anything.
    listed = con.execute(" UNION ALL ".join(
        f"SELECT 1 FROM {k.table} WHERE ({' OR '.join(_in(c) for c in k.people_columns)}){scope}"
        for k in kinds.ITEM_KINDS) + " LIMIT 1",
        [p for k in kinds.ITEM_KINDS for p in (*[u] * len(k.people_columns), *scoped)]).fetchone()
    return "" if listed else None


def person(workspace: Workspace, user: str, project: str | None = None, since: datetime | None = None,
           limit: int = 20) -> Person:
    """What `user` authored, reviewed, commented on and was assigned (counts, and the newest
    `limit` of each), the labels and paths they work on most, and their latest activity. With
    `since`: items created (authored), updated (reviewed, assigned) or notes written since then."""
    if limit < 1:
        raise UsageError(f"person's limit must be at least 1, got {limit}")
    name = _username(user)
    u = name.lower()
    start = naive_utc(since)
    with workspace.read() as con:
        pid = project_id(con, project)
        display = _known(con, u, pid)
        if display is None:
            raise UsageError(f"no user @{name} in the store" + (f" for {project}" if project else "")
                             + ": not an author, assignee, reviewer or commenter of any synced item")
        created = (" AND t.created_at >= ?", [start]) if start else ("", [])
        updated = (" AND t.updated_at >= ?", [start]) if start else ("", [])
        noted = " AND n.created_at >= ?" if start else ""
        mine = [u, *([start] if start else [])]
        lists = {
            "authored_issues": _entries(con, kinds.ISSUE, _is("t.author_username") + created[0], mine, pid,
                                        "t.created_at DESC, t.id DESC"),
            "authored_mrs": _entries(con, kinds.MERGE_REQUEST, _is("t.author_username") + created[0], mine, pid,
                                     "t.created_at DESC, t.id DESC"),
            # The `extra` columns' two parameters come first: they precede the WHERE clause's three.
            "reviewed_mrs": _entries(
                con, kinds.MERGE_REQUEST,
                f"NOT {_is('t.author_username')} AND ({_in('t.reviewers')} OR EXISTS (SELECT 1 FROM notes n WHERE "
                f"n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}' AND n.noteable_id = t.id AND {_is('n.author_username')}))"
                + updated[0], [u] * 5 + updated[1], pid,
                extra=f", {_in('t.reviewers')} AS review_requested, (SELECT count(*) FROM notes n WHERE "
                      f"n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}' AND n.noteable_id = t.id AND {_is('n.author_username')}) "
                      "AS notes"),
            "assigned": [e for kind in kinds.ITEM_KINDS
                         for e in _entries(con, kind, _in("t.assignees") + updated[0], mine, pid)],
        }
        commented = []
        for kind in kinds.ITEM_KINDS:
            scope = " AND t.project_id = ?" if pid is not None else ""
            commented += [{**_entry(kind, {k: v for k, v in r.items() if k not in ("notes", "last_note_at")}),
                           "notes": r["notes"], "last_note_at": iso(r["last_note_at"])} for r in rows(con, f"""
                SELECT {ITEM_COLUMNS}, count(*) AS notes, max(n.created_at) AS last_note_at
                FROM {_item_of(kind)} WHERE {_is('n.author_username')}{noted}{scope}
                GROUP BY ALL""", [u, *([start] if start else []), *([pid] if pid is not None else [])])]
        commented.sort(key=lambda e: (e["last_note_at"] or "", e["reference"]), reverse=True)
        lists["assigned"].sort(key=lambda e: (e["updated_at"] or "", e["reference"]), reverse=True)
        lists["commented_on"] = commented
        lists["mentioned_in"], mentioned = mentions_of(con, name, pid, start, limit=limit)
        labels = _top_labels(con, u, pid, created, updated)
        paths = _top_paths(con, u, pid, created, noted, start)
        activity = _activity(con, u, pid, start, limit)
    return Person(user=name, name=display or None, project=project, since=iso(start),
                  counts={**{key: len(value) for key, value in lists.items()}, "mentioned_in": mentioned},
                  **{key: value[:limit] for key, value in lists.items()},
                  top_labels=labels, top_paths=paths, recent_activity=activity)


def _top_labels(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, created: tuple[str, list[Any]],
                updated: tuple[str, list[Any]]) -> list[dict[str, Any]]:
    """The labels of the items the user authored or was assigned, most frequent first."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    parts, params = [], []
    for kind in kinds.ITEM_KINDS:
        parts.append(f"SELECT DISTINCT t.id, unnest(t.labels) AS label FROM {kind.table} t "
                     f"WHERE (({_is('t.author_username')}{created[0]}) OR ({_in('t.assignees')}{updated[0]})){scope}")
        params += [u, *created[1], u, *updated[1], *scoped]
    return [{"label": r["label"], "count": r["n"]} for r in rows(con, f"""
        SELECT label, count(*) AS n FROM ({' UNION ALL '.join(parts)}) GROUP BY label
        ORDER BY n DESC, label LIMIT {TOP}""", params)]


def _top_paths(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, created: tuple[str, list[Any]],
               noted: str, start: datetime | None) -> list[dict[str, Any]]:
    """The files of the user's MRs and of their DiffNotes: how many MRs and review comments each."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    found = rows(con, f"""
        SELECT path, count(*) AS n FROM (
            SELECT DISTINCT f.merge_request_id, COALESCE(f.new_path, f.old_path) AS path
            FROM mr_files f JOIN {kinds.MERGE_REQUEST.table} t ON t.id = f.merge_request_id
            WHERE {_is('t.author_username')}{created[0]}{scope}
            UNION ALL
            SELECT n.id, COALESCE(np.new_path, np.old_path) FROM note_positions np JOIN notes n ON n.id = np.note_id
            JOIN {kinds.MERGE_REQUEST.table} t ON n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}' AND t.id = n.noteable_id
            WHERE {_is('n.author_username')}{noted}{scope})
        WHERE path IS NOT NULL GROUP BY path ORDER BY n DESC, path LIMIT {TOP}""",
                 [u, *created[1], *scoped, u, *([start] if start else []), *scoped])
    return [{"path": r["path"], "count": r["n"]} for r in found]


def _activity(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime | None,
              limit: int) -> list[dict[str, Any]]:
    """The user's latest notes and the items they opened, newest first."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    out: list[dict[str, Any]] = []
    for kind in kinds.ITEM_KINDS:
        since_note, since_item = (" AND n.created_at >= ?", " AND t.created_at >= ?") if start else ("", "")
        for r in rows(con, f"""
                SELECT {ITEM_COLUMNS}, n.id AS note_id, n.body, n.created_at AS at FROM {_item_of(kind)}
                WHERE {_is('n.author_username')}{since_note}{scope} ORDER BY n.created_at DESC, n.id DESC
                LIMIT {limit}""", [u, *([start] if start else []), *scoped]):
            out.append({"at": iso(r["at"]), "action": "commented", "item": public_item(kind, r),
                        "excerpt": excerpt(r["body"]),
                        "url": kinds.note_url(r['web_url'], r['note_id']) if r["web_url"] else None})
        for r in rows(con, f"""
                SELECT {ITEM_COLUMNS} FROM {kind.table} t JOIN projects p ON p.id = t.project_id
                WHERE {_is('t.author_username')}{since_item}{scope} ORDER BY t.created_at DESC, t.id DESC
                LIMIT {limit}""", [u, *([start] if start else []), *scoped]):
            out.append({"at": iso(r["created_at"]), "action": "opened", "item": public_item(kind, r),
                        "excerpt": None, "url": r["web_url"]})
    out.sort(key=lambda a: (a["at"] or "", a["item"]["reference"]), reverse=True)
    return out[:limit]
