"""Where someone else wrote @user: the mentions `me` and `person` list (graph/people.py).

Looked up in the graph's `mentions` rows (graph/refresh.py fills them, graph/mentions.py says
which words are a mention), not found by scanning every note body. The notes are narrowed in SQL
to the newest kept note of each thread (row number over the thread, no body read), and only the
newest `limit` of them are read whole: a user mentioned in hundreds of threads costs a lookup and
one page of bodies. The reads join the item and note tables the lens shadows
(store/visibility.py), so a hidden note or a confidential issue is never listed.
"""

import re
from datetime import datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.graph.mentions import mentions_user
from gitlab_knowledge.graph.queries import ITEM_COLUMNS, excerpt, iso, public_item, rows

# `reopened` is what GitLabs before 10.x stored for an item opened again.
OPEN_STATES = ("opened", "reopened")
EXCERPT_LEAD = 60  # characters of context an excerpt keeps before the @mention it shows


def _around(text: str, user: str) -> str:
    """An excerpt of `text` that shows where it names @user (a long description names people
    anywhere)."""
    found = re.search(rf"@{re.escape(user)}", text, re.IGNORECASE)
    start = found.start() if found else 0
    if start > EXCERPT_LEAD:
        text = "…" + text[start - EXCERPT_LEAD:].lstrip()
    return excerpt(text)


def mentions_of(con: duckdb.DuckDBPyConnection, user: str, pid: int | None, start: datetime | None,
                attention: bool = False, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Every place someone else wrote @user: notes in any thread (resolved or not; the latest such
    note of each thread) and item titles and descriptions, newest first, each with its reason.
    Written since `start`; with `attention` (what `me` lists), also any older one on an open item
    or in a thread still unresolved. Returns the newest `limit` (all without one) and how many
    there are."""
    u = user.lower()
    scope, scoped = (" AND n.project_id = ?", [pid]) if pid is not None else ("", [])
    recent, since = ("n.created_at >= ?", [start]) if start is not None else ("true", [])
    # A note in a thread GitLab can resolve, not resolved: GitLab marks every note of a resolved
    # thread resolved, so the note says its thread's state.
    unresolved = "n.resolvable AND NOT COALESCE(n.resolved, false)"
    kept = f"{recent} OR (t.state IN {OPEN_STATES} OR {unresolved})" if attention else recent
    items = " UNION ALL ".join(
        f"SELECT '{k.noteable_type}' AS noteable_type, '{k.name}' AS kind, t.id, t.iid, t.title, t.state, t.web_url, "
        f"p.path_with_namespace AS project FROM {k.table} t JOIN projects p ON p.id = t.project_id"
        for k in kinds.ITEM_KINDS)
    order = "note_at DESC NULLS LAST, note_id DESC"
    found = rows(con, f"""
        WITH kept AS (
            SELECT n.id AS note_id, n.discussion_id, n.author_username AS note_author, n.created_at AS note_at,
                   CASE WHEN n.resolvable THEN COALESCE(n.resolved, false) END AS resolved,
                   t.kind, t.iid, t.title, t.state, t.web_url, t.project
            FROM notes n JOIN ({items}) t ON t.noteable_type = n.noteable_type AND t.id = n.noteable_id
            WHERE n.id IN (SELECT note_id FROM mentions WHERE username = ? AND note_id IS NOT NULL)
              AND NOT lower(COALESCE(n.author_username, '')) = ?{scope} AND ({kept})
            QUALIFY row_number() OVER (PARTITION BY n.discussion_id ORDER BY n.created_at DESC NULLS LAST,
                                                                             n.id DESC) = 1)
        SELECT *, count(*) OVER () AS total FROM kept ORDER BY {order}
        {f'LIMIT {int(limit)}' if limit is not None else ''}""", [u, u, *scoped, *since])
    total = found[0]["total"] if found else 0
    bodies = dict(con.execute("SELECT id, body FROM notes WHERE id IN (SELECT unnest(?::BIGINT[]))",
                              [[r["note_id"] for r in found]]).fetchall()) if found else {}
    out = []
    for r in found:
        kind = kinds.kind(r["kind"])
        out.append({
            "item": public_item(kind, r), "reason": "mentioned in a note", "discussion_id": r["discussion_id"],
            "note_id": r["note_id"], "author": r["note_author"], "created_at": iso(r["note_at"]),
            "excerpt": _around(bodies.get(r["note_id"]) or "", user), "resolved": r["resolved"],
            "url": kinds.note_url(r["web_url"], r["note_id"]) if r["web_url"] else None})
    scope = scope.replace("n.", "t.")
    for kind in kinds.ITEM_KINDS:
        for r in rows(con, f"""
                SELECT {ITEM_COLUMNS}, t.description FROM {kind.table} t JOIN projects p ON p.id = t.project_id
                WHERE t.id IN (SELECT item_id FROM mentions WHERE username = ? AND item_type = ? AND note_id IS NULL)
                  AND NOT lower(COALESCE(t.author_username, '')) = ?{scope}""", [u, kind.name, u, *scoped]):
            text = next((x for x in (r["description"], r["title"]) if mentions_user(x, user)), None)
            at = r["created_at"]
            if text is None or not ((start is None or (at is not None and at >= start))
                                    or (attention and r["state"] in OPEN_STATES)):
                continue
            total += 1
            out.append({
                "item": public_item(kind, r), "reason": "mentioned in the description", "discussion_id": None,
                "note_id": None, "author": r["author_username"], "created_at": iso(r["created_at"]),
                "excerpt": _around(text, user), "resolved": None, "url": r["web_url"]})
    out.sort(key=lambda m: (m["created_at"] or "", m["note_id"] or 0), reverse=True)
    return out[:limit], total
