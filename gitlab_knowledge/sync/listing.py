"""One resource's listing, read by `updated_at` anchor (the rules: sync/engine.py's docstring).

What the listing knows while it runs, and the steps of one page: which items it lists, which of
them changed since they were last examined, where the next request starts, and whether its last
item moves the stored cursor.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.gitlab.paging import Page
from gitlab_knowledge.store import payloads, raw
from gitlab_knowledge.sync.parents import Parent
from gitlab_knowledge.timeutil import parse_time


@dataclass
class ListingState:
    anchor: str | None  # the `updated_after` the next re-query asks from
    best: tuple[datetime | None, int] | None  # (updated_at, id) of the furthest cursor so far
    known: dict[int, str]  # id -> hash of the stored payload, for the live items
    done: dict[int, str] = field(default_factory=dict)  # id -> hash examined during this run
    refetched: set[int] = field(default_factory=set)  # parents whose threads this run fetched (or knew to be none)
    seen: set[int] = field(default_factory=set)  # every id the listing showed, rejected ones too
    read: set[str] = field(default_factory=set)  # page URLs of this listing, to catch a loop
    # Rows the listing showed but that were rejected. A row without a usable id hides which stored
    # item it is, so any rejection leaves the listing incomplete for deciding what GitLab dropped.
    rejected: int = 0


def load_state(con: duckdb.DuckDBPyConnection, project_id: int, kind: str, full: bool) -> ListingState:
    """Where the stored cursor leaves this resource; `--full` lists from the start."""
    cursor = con.execute(
        "SELECT updated_at_cursor, tie_breaker_id FROM sync_cursors WHERE project_id = ? AND resource_type = ?",
        [project_id, kind]).fetchone()
    known = dict(con.execute(
        "SELECT CAST(gitlab_key AS BIGINT), payload_hash FROM raw_payloads "
        "WHERE project_id = ? AND resource_type = ? AND deleted_at IS NULL",
        [project_id, kind]).fetchall())
    return ListingState(anchor=cursor[0] if cursor and not full else None,
                        best=(parse_time(cursor[0]), int(cursor[1])) if cursor and cursor[0] else None,
                        known=known)


async def list_page(client: GitLabClient, path: str, per_page: int, url: str | None,
                    anchor: str | None) -> Page:
    """GitLab's own next page when `url` is given, else the listing re-asked from `anchor`."""
    if url:
        return await client.get_page(url)
    params = {"order_by": "updated_at", "sort": "asc", "per_page": per_page, "updated_after": anchor}
    return await client.get_page(path, params)


def screen_page(state: ListingState, page: Page, kind: str,
                reject: Callable[[str], None]) -> list[dict[str, Any]]:
    """The page's storable items in cursor order, (updated_at, id); `reject` hears of the others."""
    # A rejected item is still listed: --full must not take it for deleted.
    state.seen.update(it["id"] for it in page.items if isinstance(it, dict) and isinstance(it.get("id"), int))
    items = payloads.screen_items(kinds.kind(kind).display.lower(), page.items, reject)
    state.rejected += len(page.items) - len(items)
    items = sorted(items, key=lambda it: (parse_time(it.get("updated_at")) or datetime.min, int(it["id"])))
    state.seen.update(int(it["id"]) for it in items)
    return items


def changed(state: ListingState, items: Sequence[dict[str, Any]], full: bool) -> list[dict[str, Any]]:
    """The items to fetch: not already examined in this form during this run, and either `--full`
    or different from what the store holds."""
    wanted = []
    for it in items:
        digest = raw.payload_hash(raw.canonical_json(it))
        if state.done.get(int(it["id"])) == digest:
            continue
        if full or state.known.get(int(it["id"])) != digest:
            wanted.append(it)
        state.done[int(it["id"])] = digest
    return wanted


def follow(state: ListingState, page: Page, last: dict[str, Any]) -> str | None:
    """Where the listing goes on after a page that has a next one: the next request's URL, or
    None to re-query from the anchor, moved to the page's last item."""
    if state.anchor is not None and parse_time(last["updated_at"]) == parse_time(state.anchor):
        return page.next_url  # a run of equal timestamps longer than a page
    state.anchor = last["updated_at"]
    return None


def moves_cursor(state: ListingState, last: dict[str, Any]) -> dict[str, Any] | None:
    """`last` when its (updated_at, id) is past the cursor so far (the cursor to commit with the
    page), else None."""
    last_key = (parse_time(last["updated_at"]), int(last["id"]))
    if state.best is not None and not last_key > state.best:
        return None
    state.best = last_key
    return last


def committed(state: ListingState, parents: Sequence[Parent]) -> None:
    """A page's parents are in the store: their threads are fetched, their payloads known."""
    for p in parents:
        state.refetched.add(p.gitlab_id)
        if p.threads is not None:
            state.known[p.gitlab_id] = state.done[p.gitlab_id]
