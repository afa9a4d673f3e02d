"""Each user's items, kept by the graph layer: what `me` and `person` (graph/people.py) read.

`user_items`: one row per user and item they authored, are assigned to or (an MR) review, and per
item they commented on, with how many notes they wrote there and the newest one's date (a row for
their internal notes apart, so a lens that hides internal notes hides that row, and what it counts
is what its `notes` view shows). `user_item_notes`: the notes others wrote on the items a user
authored, is assigned to or reviews (`me`'s new notes on my items).

Usernames are kept in lower case, as `me` and `person` compare them. Rebuilt for an item whenever
the graph layer rebuilds it (graph/refresh.py: a change to the item or any of its threads), from
the normalized rows, in SQL: nothing of it leaves DuckDB. Migration 10 filled them for the stores
written before.
"""

import duckdb

from gitlab_knowledge import kinds

_LISTS = {kinds.ISSUE.name: (("assignee", "assignees"),),
          kinds.MERGE_REQUEST.name: (("assignee", "assignees"), ("reviewer", "reviewers"))}


def rebuild(con: duckdb.DuckDBPyConnection, kind: kinds.Kind, ids: list[int]) -> None:
    """The rows of these items of `kind`, as their normalized rows say now."""
    for table in ("user_items", "user_item_notes"):
        con.execute(f"DELETE FROM {table} WHERE item_type = ? AND item_id IN (SELECT unnest(?::BIGINT[]))",
                    [kind.name, ids])
    chosen = "id IN (SELECT unnest(?::BIGINT[]))"
    listed = " UNION ".join(
        f"SELECT lower(name), '{kind.name}', id, project_id, '{role}', false, NULL, NULL "
        f"FROM (SELECT id, project_id, unnest({column}) AS name FROM {kind.table} WHERE {chosen}) WHERE name IS NOT NULL"
        for role, column in _LISTS[kind.name])
    con.execute(f"""
        INSERT INTO user_items
        SELECT lower(author_username), '{kind.name}', id, project_id, 'author', false, NULL, NULL FROM {kind.table}
        WHERE {chosen} AND author_username IS NOT NULL
        UNION {listed}""", [ids] * (1 + len(_LISTS[kind.name])))
    con.execute(f"""
        INSERT INTO user_items
        SELECT lower(n.author_username), '{kind.name}', t.id, t.project_id, 'commenter', coalesce(n.internal, false),
               count(*), max(n.created_at)
        FROM notes n JOIN {kind.table} t ON n.noteable_type = '{kind.noteable_type}' AND t.id = n.noteable_id
        WHERE t.{chosen} AND n.author_username IS NOT NULL GROUP BY ALL""", [ids])
    # A user with two roles on an item (an MR's author is usually its assignee) sees each note once.
    con.execute(f"""
        INSERT INTO user_item_notes
        SELECT DISTINCT r.username, r.item_type, r.item_id, r.project_id, n.id, n.author_username, n.created_at,
               coalesce(n.internal, false)
        FROM user_items r JOIN notes n ON n.noteable_type = '{kind.noteable_type}' AND n.noteable_id = r.item_id
        WHERE r.item_type = '{kind.name}' AND r.item_id IN (SELECT unnest(?::BIGINT[])) AND r.role <> 'commenter'
          AND lower(coalesce(n.author_username, '')) <> r.username""", [ids])
