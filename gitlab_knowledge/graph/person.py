"""`person`: what someone works on, read from the graph's rows per user (graph/roles.py).

The answer is a typed record (graph/answers.py) whose `as_dict()` is the JSON document of
cli/schemas/person.json. Their items with their roles and their notes counted per item come from
one read of `user_items` (graph/people_rows.py); their latest notes are looked for only in the
items where they wrote last, and their notes since a date (`since`) are counted from the notes.
"""

from collections import Counter
from datetime import datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.graph.answers import Person
from gitlab_knowledge.graph.mentioned import mentions_of
from gitlab_knowledge.graph.queries import ITEM_COLUMNS, excerpt, iso, project_id, public_item, rows
from gitlab_knowledge.graph.roles import ROLES, descending, entry, is_user, items_of, newest, plain, username
from gitlab_knowledge.graph.roles import since as is_since
from gitlab_knowledge.store.alongside import read_alongside
from gitlab_knowledge.timeutil import naive_utc
from gitlab_knowledge.workspace import Workspace

TOP = 10  # labels and paths `person` lists


def _in(column: str) -> str:
    """`column` (a TEXT[] of usernames) holds the user (the lowered username is the parameter)."""
    return f"COALESCE(list_contains(list_transform({column}, lambda x: lower(x)), ?), false)"


def _item_of(kind: kinds.Kind) -> str:
    """SQL joining a note `n` to its item `t` and project `p` of this kind."""
    return (f"notes n JOIN {kind.table} t ON n.noteable_type = '{kind.noteable_type}' AND t.id = n.noteable_id "
            "JOIN projects p ON p.id = t.project_id")


def _known(con: duckdb.DuckDBPyConnection, u: str, pid: int | None) -> str | None:
    """The user's display name if they appear anywhere in scope ("" without one), else None."""
    scope = " AND project_id = ?" if pid is not None else ""
    scoped = [pid] if pid is not None else []
    authors = (*(k.table for k in kinds.ITEM_KINDS), "notes")
    written = " UNION ALL ".join(f"SELECT author_name, author_username FROM {t} WHERE true{scope}" for t in authors)
    named = con.execute(f"""
        SELECT author_name FROM ({written})
        WHERE {is_user('author_username')} ORDER BY author_name IS NULL LIMIT 1""", [*scoped * len(authors), u]).fetchone()
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
    name = username(user)
    u = name.lower()
    start = naive_utc(since)
    with workspace.read() as con:
        pid = project_id(con, project)
        display = _known(con, u, pid)
        if display is None:
            raise UsageError(f"no user @{name} in the store" + (f" for {project}" if project else "")
                             + ": not an author, assignee, reviewer or commenter of any synced item")
        created = (" AND t.created_at >= ?", [start]) if start else ("", [])
        noted = " AND n.created_at >= ?" if start else ""
        # The mentions and the paths need nothing of their items': read on another connection
        # meanwhile, as DuckDB runs both at once (graph/people.py `me` does the same).
        with read_alongside(con, lambda other: (mentions_of(other, name, pid, start, limit=limit),
                                                _top_paths(other, u, pid, created, noted, start))) as beside:
            lists, counts, authored, assigned, roles = _lists(con, u, pid, start, limit)
            activity = _activity(con, u, pid, start, limit, authored, roles)
            (lists["mentioned_in"], mentioned), paths = beside.result()
        labels = _top_labels(authored, assigned)
    return Person(user=name, name=display or None, project=project, since=iso(start),
                  counts={**counts, "mentioned_in": mentioned}, **lists,
                  top_labels=labels, top_paths=paths, recent_activity=activity)


Roles = dict[kinds.Kind, list[dict[str, Any]]]


def _lists(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime | None,
           limit: int) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int], Roles, Roles, Roles]:
    """`person`'s lists of items (the newest `limit` of each) and how many there are of each, with
    the items they authored and are assigned (newest first) and every item with their roles."""
    # Every item they authored, are assigned, review or commented on, with their notes there,
    # read once for both kinds: every list but the mentions comes from it.
    roles = items_of(con, u, pid)
    authored = {kind: sorted((r for r in items if r["is_author"] and (start is None or is_since(r["created_at"], start))),
                             key=lambda r: (descending(r["created_at"]), -r["id"])) for kind, items in roles.items()}
    assigned = {kind: [r for r in items if r["is_assignee"] and (start is None or is_since(r["updated_at"], start))]
                for kind, items in roles.items()}
    reviewed = [r for r in roles[kinds.MERGE_REQUEST] if not r["is_author"] and (r["is_reviewer"] or r["notes"])
                and (start is None or is_since(r["updated_at"], start))]
    commented = _commented(roles) if start is None else _commented_since(con, u, pid, start)
    everyone = [(kind, r) for kind in kinds.ITEM_KINDS for r in assigned[kind]]
    # How many of each, and the entries of the `limit` shown (thousands of commented items
    # made into entries to show twenty cost more than reading them).
    counts = {"authored_issues": len(authored[kinds.ISSUE]), "authored_mrs": len(authored[kinds.MERGE_REQUEST]),
              "reviewed_mrs": len(reviewed), "assigned": len(everyone), "commented_on": len(commented)}
    lists = {
        "authored_issues": plain(kinds.ISSUE, authored[kinds.ISSUE][:limit]),
        "authored_mrs": plain(kinds.MERGE_REQUEST, authored[kinds.MERGE_REQUEST][:limit]),
        "reviewed_mrs": [entry(kinds.MERGE_REQUEST, {**{k: v for k, v in r.items() if k not in ROLES},
                                                     "review_requested": r["is_reviewer"], "notes": r["notes"] or 0})
                         for r in reviewed[:limit]],
        "assigned": [plain(kind, [r])[0] for kind, r in newest(everyone, "updated_at", limit)],
        "commented_on": [{**plain(kind, [r])[0], "notes": r["notes"], "last_note_at": iso(r["last_note_at"])}
                         for kind, r in newest(commented, "last_note_at", limit)],
    }
    return lists, counts, authored, assigned, roles


def _commented(roles: dict[kinds.Kind, list[dict[str, Any]]]) -> list[tuple[kinds.Kind, dict[str, Any]]]:
    """The items they wrote notes on, with how many and the newest's date (their rows count them)."""
    return [(kind, r) for kind in kinds.ITEM_KINDS for r in roles[kind] if r["notes"]]


def _commented_since(con: duckdb.DuckDBPyConnection, u: str, pid: int | None,
                     start: datetime) -> list[tuple[kinds.Kind, dict[str, Any]]]:
    """The items they wrote notes on since `start`, counted from the notes (the rows count all
    time). Their notes counted per item before the items are joined."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    return [(kinds.kind(r.pop("kind_name")), r) for r in rows(con, " UNION ALL ".join(f"""
                SELECT '{kind.name}' AS kind_name, {ITEM_COLUMNS}, c.notes, c.last_note_at
                FROM (SELECT n.noteable_id, count(*) AS notes, max(n.created_at) AS last_note_at FROM notes n
                      WHERE n.noteable_type = '{kind.noteable_type}' AND {is_user('n.author_username')}
                        AND n.created_at >= ? GROUP BY n.noteable_id) c
                JOIN {kind.table} t ON t.id = c.noteable_id JOIN projects p ON p.id = t.project_id
                WHERE true{scope}""" for kind in kinds.ITEM_KINDS), [p for _ in kinds.ITEM_KINDS for p in (u, start, *scoped)])]


def _top_labels(authored: dict[kinds.Kind, list[dict[str, Any]]],
                assigned: dict[kinds.Kind, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The labels of the items the user authored or was assigned, most frequent first (each
    item's label once)."""
    counts: Counter[str | None] = Counter()
    for kind in kinds.ITEM_KINDS:
        pairs = {(r["id"], label) for r in (*authored[kind], *assigned[kind]) for label in r["labels"] or []}
        counts.update(label for _, label in pairs)
    ranked = sorted(counts.items(), key=lambda x: (-x[1], x[0] is None, x[0] or ""))[:TOP]
    return [{"label": label, "count": n} for label, n in ranked]


def _top_paths(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, created: tuple[str, list[Any]],
               noted: str, start: datetime | None) -> list[dict[str, Any]]:
    """The files of the user's MRs and of their DiffNotes: how many MRs and review comments each."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    found = rows(con, f"""
        SELECT path, count(*) AS n FROM (
            SELECT DISTINCT f.merge_request_id, COALESCE(f.new_path, f.old_path) AS path
            FROM mr_files f JOIN {kinds.MERGE_REQUEST.table} t ON t.id = f.merge_request_id
            WHERE {is_user('t.author_username')}{created[0]}{scope}
            UNION ALL
            SELECT n.id, COALESCE(np.new_path, np.old_path) FROM note_positions np JOIN notes n ON n.id = np.note_id
            JOIN {kinds.MERGE_REQUEST.table} t ON n.noteable_type = '{kinds.MERGE_REQUEST.noteable_type}' AND t.id = n.noteable_id
            WHERE {is_user('n.author_username')}{noted}{scope})
        WHERE path IS NOT NULL GROUP BY path ORDER BY n DESC, path LIMIT {TOP}""",
                 [u, *created[1], *scoped, u, *([start] if start else []), *scoped])
    return [{"path": r["path"], "count": r["n"]} for r in found]


def _activity(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, start: datetime | None, limit: int,
              authored: dict[kinds.Kind, list[dict[str, Any]]],
              roles: dict[kinds.Kind, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The user's latest notes and the items they opened (`authored`, newest first), newest first."""
    scope, scoped = (" AND t.project_id = ?", [pid]) if pid is not None else ("", [])
    since_note = " AND n.created_at >= ?" if start else ""
    # Per kind, the newest notes, in one query, each part in its own order as the parts come.
    parts, params = [], []
    for i, kind in enumerate(kinds.ITEM_KINDS):
        items = _last_written(roles[kind], start, limit)
        if not items:
            continue
        parts.append(f"""(SELECT {i} AS part, '{kind.name}' AS kind_name, {ITEM_COLUMNS}, n.id AS note_id, n.body,
                                n.created_at AS sort_at FROM {_item_of(kind)}
                         WHERE n.noteable_id IN (SELECT unnest(?::BIGINT[])) AND {is_user('n.author_username')}{since_note}{scope}
                         ORDER BY n.created_at DESC, n.id DESC LIMIT {limit})""")
        params += [items, u, *([start] if start else []), *scoped]
    found = rows(con, " UNION ALL ".join(parts) + " ORDER BY part, sort_at DESC, note_id DESC", params) if parts else []
    out: list[dict[str, Any]] = []
    for kind in kinds.ITEM_KINDS:
        for r in found:
            if r["kind_name"] == kind.name:
                out.append({"at": iso(r["sort_at"]), "action": "commented", "item": public_item(kind, r),
                            "excerpt": excerpt(r["body"]),
                            "url": kinds.note_url(r['web_url'], r['note_id']) if r["web_url"] else None})
        out += [{"at": iso(r["created_at"]), "action": "opened", "item": public_item(kind, r), "excerpt": None,
                 "url": r["web_url"]} for r in authored[kind][:limit]]
    out.sort(key=lambda a: (a["at"] or "", a["item"]["reference"]), reverse=True)
    return out[:limit]


def _last_written(items: list[dict[str, Any]], start: datetime | None, limit: int) -> list[int]:
    """The items that hold the user's newest `limit` notes (since `start`): those whose newest note
    is at least as new as the `limit`-th newest item's. Any other item's notes are all older than
    `limit` notes of these (reading only these spares a scan of every note they wrote, ~15 ms
    at 100K documents). Without `limit` dated items, every item they wrote on."""
    written = [r for r in items if r["notes"]]
    dated = sorted((r["last_note_at"] for r in written if r["last_note_at"] is not None
                    and (start is None or r["last_note_at"] >= start)), reverse=True)
    if len(dated) < limit:
        return [r["id"] for r in written]
    return [r["id"] for r in written if r["last_note_at"] is not None and r["last_note_at"] >= dated[limit - 1]]
