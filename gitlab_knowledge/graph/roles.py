"""A user's items with their roles, as `me` (graph/people.py) and `person` (graph/person.py) read
them: from the graph's `user_items` rows (graph/people_rows.py), one query for both kinds.

Reading the rows by username replaced testing every item's author, assignees and reviewers and
joining every note on each call (at 100K documents ~10 ms for the roles, ~30 ms for the notes
counts). Under a lens the rows of hidden items and of internal notes the lens hides are hidden
like the items and notes themselves (store/visibility.py, store/viewer_lens.py), and the items are
joined through the lens's views. Usernames compare without case, as GitLab's do.
"""

from datetime import datetime, timedelta
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.graph.mentioned import OPEN_STATES
from gitlab_knowledge.graph.queries import ITEM_COLUMNS, iso, public_item, rows

# The columns ITEM_COLUMNS names: what an entry says is chosen; any other column is an extra.
ITEM_KEYS = {c.split(" AS ")[-1].split(".")[-1] for c in ITEM_COLUMNS.split(", ")}
# What `items_of` adds to an item's columns: never an entry's extra.
ROLES = ("is_author", "is_assignee", "is_reviewer", "merged_at", "notes", "last_note_at")


def is_user(column: str) -> str:
    """`column` (a username) is the user (the lowered username is the parameter)."""
    return f"lower(COALESCE({column}, '')) = ?"


def username(user: str) -> str:
    name = user.strip().removeprefix("@").strip()
    if not name or any(c.isspace() for c in name):
        raise UsageError(f"expected a GitLab username such as janedoe, got {user!r}")
    return name


def entry(kind: kinds.Kind, row: dict[str, Any]) -> dict[str, Any]:
    """An item as the answers list it, with any columns beyond ITEM_COLUMNS kept as extras."""
    out = {**public_item(kind, row), "created_at": iso(row["created_at"]), "updated_at": iso(row["updated_at"])}
    for key, value in row.items():
        if key not in ITEM_KEYS and key not in out:
            out[key] = iso(value) if isinstance(value, datetime) else value
    return out


def plain(kind: kinds.Kind, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries of items read with their roles (`items_of`), without them."""
    return [entry(kind, {k: v for k, v in r.items() if k not in ROLES}) for r in items]


def since(at: datetime | None, start: datetime) -> bool:
    return at is not None and at >= start


def descending(at: datetime | None) -> tuple[int, int]:
    """Newest first, an unknown time last (SQL's `DESC NULLS LAST`), to the microsecond."""
    return (1, 0) if at is None else (0, -((at - datetime.min) // timedelta(microseconds=1)))


def newest(found: list[tuple[kinds.Kind, dict[str, Any]]], at: str,
           limit: int) -> list[tuple[kinds.Kind, dict[str, Any]]]:
    """The first `limit` of `found` (items with their kind) as the answers order them: by the
    ISO text of `at` (none last), then reference, descending. Sorted by time first: only items
    within the second of the `limit`-th can change places by the text (a whole second's text,
    `…:44Z`, sorts after its fractions', `…:44.5Z`), so only those are made into text."""
    by_time = sorted(found, key=lambda x: descending(x[1][at]))
    if len(by_time) > limit and by_time[limit - 1][1][at] is not None:
        floor = by_time[limit - 1][1][at].replace(microsecond=0)
        by_time = [x for x in by_time if x[1][at] is not None and x[1][at] >= floor]
    return sorted(by_time, key=lambda x: (iso(x[1][at]) or "", x[0].ref(x[1]["iid"], x[1]["project"])),
                  reverse=True)[:limit]


def items_of(con: duckdb.DuckDBPyConnection, u: str, pid: int | None, roles_only: bool = False,
             open_or_since: datetime | None = None) -> dict[kinds.Kind, list[dict[str, Any]]]:
    """Every item the user authored, is assigned to, (an MR) reviews or (unless `roles_only`)
    commented on, newest update first, each with its columns, `merged_at`, the user's roles and
    their notes there (`notes`, `last_note_at`: None without any), in one query for both kinds.
    `open_or_since`: only the open items and those closed or merged since then."""
    scope, scoped = (" AND project_id = ?", [pid]) if pid is not None else ("", [])
    roles = " AND role <> 'commenter'" if roles_only else ""
    parts, params = [], []
    for kind in kinds.ITEM_KINDS:
        mr = kind is kinds.MERGE_REQUEST
        live = "" if open_or_since is None else \
            f" WHERE t.state IN {OPEN_STATES} OR t.closed_at >= ?{' OR t.merged_at >= ?' if mr else ''}"
        parts.append(f"""
            SELECT '{kind.name}' AS kind_name, {ITEM_COLUMNS}, {'t.merged_at' if mr else 'NULL::TIMESTAMP'} AS merged_at,
                   r.is_author, r.is_assignee, r.is_reviewer, r.notes, r.last_note_at
            FROM r JOIN {kind.table} t ON r.item_type = '{kind.name}' AND t.id = r.item_id
            JOIN projects p ON p.id = t.project_id{live}""")
        params += [] if open_or_since is None else [open_or_since] * (2 if mr else 1)
    found: dict[kinds.Kind, list[dict[str, Any]]] = {kind: [] for kind in kinds.ITEM_KINDS}
    for r in rows(con, f"""
            WITH r AS (SELECT item_type, item_id, bool_or(role = 'author') AS is_author,
                              bool_or(role = 'assignee') AS is_assignee, bool_or(role = 'reviewer') AS is_reviewer,
                              sum(notes)::BIGINT AS notes, max(last_note_at) AS last_note_at
                       FROM user_items WHERE username = ?{scope}{roles} GROUP BY ALL)
            {' UNION ALL '.join(parts)} ORDER BY updated_at DESC, id DESC""", [u, *scoped, *params]):
        found[kinds.kind(r.pop("kind_name"))].append(r)
    return found
