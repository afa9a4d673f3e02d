"""Where someone else wrote @user: the mentions `me` and `person` list (graph/people.py).

Looked up in the graph's `mentions` rows (graph/refresh.py fills them, graph/mentions.py says
which words are a mention), not found by scanning every note body: the rows say who wrote each
mention when, and the note's thread state, so the newest kept mention of each thread is picked
from them alone (here: a window over them in SQL cost more than reading them), and only the texts
of the newest `limit` are read. Under a lens the `mentions` rows of hidden notes and confidential
issues are hidden like the notes themselves (store/visibility.py), and the items are read through
the lens's views.
"""

from datetime import datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.graph.mentions import around
from gitlab_knowledge.graph.queries import excerpt, iso, note_bodies, public_item, rows

# `reopened` is what GitLabs before 10.x stored for an item opened again.
OPEN_STATES = ("opened", "reopened")


def mentions_of(con: duckdb.DuckDBPyConnection, user: str, pid: int | None, start: datetime | None,
                attention: bool = False, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Every place someone else wrote @user: notes in any thread (resolved or not; the latest such
    note of each thread) and item titles and descriptions, newest first, each with its reason.
    Written since `start`; with `attention` (what `me` lists), also any older one on an open item
    or in a thread still unresolved. Returns the newest `limit` (all without one) and how many
    there are."""
    rows_sql, params = mention_rows(user, pid)
    kept, since = kept_mentions(start, attention)
    items = " UNION ALL ".join(
        f"SELECT '{k.name}' AS kind, t.id, t.iid, t.title, t.state, t.web_url, p.path_with_namespace AS project "
        f"FROM {k.table} t JOIN projects p ON p.id = t.project_id" for k in kinds.ITEM_KINDS)
    kept_rows = rows(con, f"""
        SELECT m.*, t.kind, t.iid, t.title, t.state, t.web_url, t.project
        FROM ({rows_sql}) m JOIN ({items}) t ON t.kind = m.item_type AND t.id = m.item_id WHERE {kept}""",
                     [*params, *since])
    return picked(con, kept_rows, user, limit)


def mention_rows(user: str, pid: int | None) -> tuple[str, list[Any]]:
    """SQL of the `mentions` rows naming the user that someone else wrote (in `pid`'s project when
    given), with what `picked` needs of them besides their item, and its parameters."""
    u = user.lower()
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    return (f"""
        SELECT note_id, discussion_id, found_in, item_type, item_id, author_username AS author, excerpt, created_at,
               CASE WHEN resolvable THEN COALESCE(resolved, false) END AS resolved, resolvable
        FROM mentions WHERE username = ? AND NOT lower(COALESCE(author_username, '')) = ?{scope}""", [u, u, *scoped])


def kept_mentions(start: datetime | None, attention: bool, row: str = "m.") -> tuple[str, list[Any]]:
    """The condition on a mention row (`mention_rows`' columns, each named `row` + its name)
    joined to its item `t` that keeps it (see `mentions_of`), and its parameters."""
    recent, since = (f"{row}created_at >= ?", [start]) if start is not None else ("true", [])
    # A note in a thread GitLab can resolve, not resolved: GitLab marks every note of a resolved
    # thread resolved, so the note says its thread's state.
    unresolved = f"{row}resolvable AND NOT COALESCE({row}resolved, false)"
    return (f"({recent} OR t.state IN {OPEN_STATES} OR ({unresolved}))" if attention else f"({recent})"), since


def picked(con: duckdb.DuckDBPyConnection, kept_rows: list[dict[str, Any]], user: str,
           limit: int | None) -> tuple[list[dict[str, Any]], int]:
    """The answer's mentions from the kept rows (`mention_rows` with their item's kind, iid, title,
    state, web_url and project): one entry per thread (its newest kept note) and per item whose
    title or description names the user (the description's words shown before the title's),
    picked here: a window over the rows in SQL cost ~4 ms at 100K documents. The newest `limit`,
    and how many there are."""
    newest: dict[Any, dict[str, Any]] = {}
    for r in sorted(kept_rows, key=_newest_first, reverse=True):
        thread = r["discussion_id"] if r["discussion_id"] is not None else f"{r['item_type']}:{r['item_id']}"
        newest.setdefault(thread, r)
    # Newest first, an unknown time last, then the higher note id (a description's mention last).
    everyone = sorted(newest.values(), reverse=True, key=lambda r: (
        r["created_at"] is not None, r["created_at"] or datetime.min, r["note_id"] or 0))
    found = everyone[:limit] if limit is not None else everyone
    # The words around each mention as the graph layer kept them; read from the text for rows
    # written before it kept them (until the graph layer's next run).
    texts = _texts(con, [r for r in found if r["excerpt"] is None])
    out = []
    for r in found:
        kept = r["excerpt"]
        if kept is None:
            kept = around(texts.get((r["kind"], r["item_id"], r["note_id"]), ""), user)
        out.append({
            "item": public_item(kinds.kind(r["kind"]), r),
            "reason": "mentioned in a note" if r["note_id"] is not None else "mentioned in the description",
            "discussion_id": r["discussion_id"], "note_id": r["note_id"], "author": r["author"],
            "created_at": iso(r["created_at"]), "excerpt": excerpt(kept), "resolved": r["resolved"],
            "url": r["web_url"] if r["note_id"] is None
            else kinds.note_url(r["web_url"], r["note_id"]) if r["web_url"] else None})
    return out, len(everyone)


def _newest_first(r: dict[str, Any]) -> tuple[Any, ...]:
    """A thread's (or item's) mentions in reverse of the order to show them in (sorted with
    `reverse`, which keeps equal ones in their order): the newest note first (an unknown time
    last), then the description before the title. Plain values, not negated times: this sorts
    every kept mention of the user."""
    return (r["created_at"] is not None, r["created_at"] or datetime.min,
            r["note_id"] if r["note_id"] is not None else -1, r["found_in"] == "description")


def _texts(con: duckdb.DuckDBPyConnection, found: list[dict[str, Any]]) -> dict[tuple[str, int, int | None], str]:
    """The words that name the user, for the mentions shown only: the note's body, or the item's
    description or title (by kind, item id and note id)."""
    out: dict[tuple[str, int, int | None], str] = {}
    notes = [r for r in found if r["note_id"] is not None]
    if notes:
        bodies = note_bodies(con, [r["note_id"] for r in notes])
        out.update({(r["kind"], r["item_id"], r["note_id"]): bodies.get(r["note_id"]) or "" for r in notes})
    for kind in kinds.ITEM_KINDS:
        described = {r["item_id"]: r["found_in"] for r in found if r["note_id"] is None and r["kind"] == kind.name}
        if described:
            for item_id, title, description in con.execute(
                    f"SELECT id, title, description FROM {kind.table} WHERE id IN (SELECT unnest(?::BIGINT[]))",
                    [sorted(described)]).fetchall():
                out[(kind.name, item_id, None)] = (description if described[item_id] == "description" else title) or ""
    return out
