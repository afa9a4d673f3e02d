"""What one page of parents (or one recheck batch) writes to the raw layer, in the transaction
the sync opens for it, and what a complete listing's evidence removes."""

from collections.abc import Sequence
from typing import Any

import duckdb

from gitlab_knowledge.store import raw
from gitlab_knowledge.sync import files
from gitlab_knowledge.sync.parents import Parent
from gitlab_knowledge.sync.stats import ResourceStats
from gitlab_knowledge.timeutil import utcnow


def write_parents(con: duckdb.DuckDBPyConnection, prov: raw.Provenance, kind: str, parents: Sequence[Parent],
                  stats: ResourceStats, cursor_item: dict[str, Any] | None, *, first_cursor: bool = False) -> None:
    """Items, an MR's files, threads and tombstones of the vanished, then the cursor if it moved:
    one page commits all of it or nothing. `first_cursor`: the listing had no cursor before this
    one, so in a first sync (`prov.fresh`: the project had none stored) no row is there to replace."""
    alive = [p for p in parents if p.threads is not None]
    gone = [p.gitlab_id for p in parents if p.threads is None]
    items = [raw.RawRow.for_item(kind, p.item, p.fetched_at) for p in alive if p.item is not None]
    file_rows = [files.raw_row(p.item, p.files) for p in alive if p.item is not None and p.files is not None]
    fetched = [raw.ParentDiscussions(kind, p.gitlab_id, p.threads, p.kept, p.keep_all) for p in alive
               if p.threads is not None]
    # Upserted together: in a first sync, one statement for the page's items, files and threads.
    counts, _, upserted = raw.upsert_groups(con, [items, file_rows, raw.discussion_rows(fetched)], prov)
    stats.file_fetches += len(file_rows)
    rechecked = [p for p in alive if p.recheck]
    unchanged = [p for p in rechecked if p.item is None]
    if unchanged:
        con.executemany(
            "UPDATE raw_payloads SET discussions_fetched_at = ? WHERE resource_type = ? AND gitlab_key = ?",
            [[p.fetched_at, kind, str(p.gitlab_id)] for p in unchanged])
    threads = raw.replace_discussions(con, fetched, prov, new_parents=len(items) == len(alive) == counts.new,
                                      upserted=upserted)
    deleted = raw.tombstone_parents(con, kind, gone)
    if cursor_item is not None:
        # A plain insert where no row can be there: ~0.5 ms of CPU against ~2 ms replacing one.
        con.execute(f"""
            INSERT {"" if first_cursor and prov.fresh else "OR REPLACE "}INTO sync_cursors
                (project_id, resource_type, updated_at_cursor, tie_breaker_id, moved_at, sync_run_id)
            VALUES (?, ?, ?, ?, ?, ?)
        """, [prov.project_id, kind, cursor_item["updated_at"], int(cursor_item["id"]), utcnow(),
              prov.sync_run_id])
    stats.fetched += len(items)
    stats.new += counts.new
    stats.updated += counts.updated
    stats.deleted += deleted
    stats.discussion_fetches += len(alive)
    stats.rechecked += len(rechecked)
    stats.threads_new += threads.new
    stats.threads_updated += threads.updated
    stats.threads_deleted += threads.deleted


def remove_unlisted(con: duckdb.DuckDBPyConnection, project_id: int, kind: str, seen: set[int]) -> int:
    """Tombstone the live parents a complete listing left out; how many."""
    missing = sorted(raw.live_parent_ids(con, project_id, kind) - seen)
    return raw.tombstone_parents(con, kind, missing)
