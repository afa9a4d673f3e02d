"""The normalized layer's releases: raw release payloads → the `releases` table.

A release row is keyed by its raw payload's id (GitLab gives a release none): a changed payload
rewrites its row, a tombstoned one deletes it. Stored payloads are checked again
(store/payloads.py), so a bad row an older version wrote is skipped with a line, not fatal.
"""

import json
import logging
from typing import Any, Protocol

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.normalized.transform import release_row
from gitlab_knowledge.store.bulk import insert_rows
from gitlab_knowledge.store.payloads import release_name, release_problem

log = logging.getLogger(__name__)
RELEASE = kinds.RELEASE


class Counts(Protocol):
    parents_rebuilt: int
    parents_deleted: int
    rejected: int


def rebuild_releases(con: duckdb.DuckDBPyConnection, project_id: int, low: int, high: int, stats: Counts) -> None:
    """Rewrite the rows of the project's releases whose raw payload changed in (low, high]."""
    changed = con.execute("""
        SELECT id, json, deleted_at IS NOT NULL FROM raw_payloads
        WHERE project_id = ? AND resource_type = ? AND change_seq > ? AND change_seq <= ?
    """, [project_id, RELEASE.name, low, high]).fetchall()
    if not changed:
        return
    con.execute(f"DELETE FROM {RELEASE.table} WHERE id IN (SELECT unnest(?::BIGINT[]))", [[int(r[0]) for r in changed]])
    rows: list[dict[str, Any]] = []
    for raw_id, text, deleted in changed:
        if deleted:
            stats.parents_deleted += 1
            continue
        payload = None
        try:
            payload = json.loads(text)
            problem = release_problem(payload, utf8=False)
            if problem is None:
                rows.append(release_row(payload, int(raw_id), project_id))
                continue
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        stats.rejected += 1
        log.warning("skipped %s: %s", release_name(payload), problem)
    # One tag, one row: a payload stored under another key for the same tag (never written by
    # this code) would break the table's key, so the later raw row wins.
    by_tag = {row["tag_name"]: row for row in sorted(rows, key=lambda r: r["id"])}
    con.execute(f"DELETE FROM {RELEASE.table} WHERE project_id = ? AND tag_name IN (SELECT unnest(?::TEXT[]))",
                [project_id, list(by_tag)])
    insert_rows(con, RELEASE.table, list(by_tag.values()), {"change_seq": "nextval('change_seq')"})
    stats.parents_rebuilt += len(by_tag)
