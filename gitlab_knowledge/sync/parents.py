"""A listed issue or merge request and what is fetched beside it: its threads, an MR's files.

Nothing is removed on doubt: a 404 on an item's thread listing counts as the item gone only when
the item's own GET answers 404 too.
"""

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import GitLabError, NotFoundError, first_error
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.store import payloads
from gitlab_knowledge.timeutil import naive_utc, utcnow


@dataclass
class Parent:
    kind: str
    gitlab_id: int
    iid: int
    item: dict[str, Any] | None  # None: a recheck, the stored item payload stays
    threads: list[dict[str, Any]] | None = None  # None: the parent vanished (404)
    fetched_at: datetime | None = None
    recheck: bool = False  # fetched for the ThrottledTouch recheck, not because the list showed a change
    kept: set[str] = field(default_factory=set)  # rejected threads: their stored versions stay
    keep_all: bool = False  # a rejected thread without a usable id: no stored thread goes
    files: list[dict[str, Any]] | None = None  # an MR's changed files (sync/files.py); None: not fetched

    @property
    def listed(self) -> dict[str, Any]:
        """The item payload of a parent a listing brought (only a recheck's is None)."""
        if self.item is None:
            raise AssertionError(f"{self.kind} {self.gitlab_id}: a recheck has no listed payload")
        return self.item


async def fetch_threads(client: GitLabClient, project_id: int, parents: Sequence[Parent],
                        reject: Callable[[str, str], None]) -> None:
    """Every parent's threads, concurrently, into `threads` and `fetched_at` (GitLab's clock);
    `reject` gets (GitLab collection, line) for each thread the store cannot hold."""
    if not parents:
        return
    resource = {k.name: k.api_path for k in kinds.ITEM_KINDS}

    async def one(p: Parent) -> None:
        item = f"/projects/{project_id}/{resource[p.kind]}/{p.iid}"
        try:
            threads, server_time = await client.get_all(f"{item}/discussions")
        except NotFoundError as exc:
            # Deleted between the list call and this one, or a 404 from something in between:
            # only the item's own 404 is evidence enough to remove it.
            try:
                await client.get(item)
            except NotFoundError:
                p.threads = None
                p.fetched_at = utcnow()
                return
            raise GitLabError(f"{exc}, yet GitLab still serves {kinds.kind(p.kind).ref(p.iid)} itself: "
                              "nothing was removed; try again later", status=404) from None
        name = f"{kinds.kind(p.kind).display.lower()} iid {p.iid}"
        ok, p.kept, p.keep_all = payloads.screen_threads(
            name, threads if isinstance(threads, list) else [threads],
            lambda line: reject(resource[p.kind], line))
        # Every thread is kept, system-only ones too: GitLab writes its links between items
        # there ("mentioned in merge request !847"); the normalized layer keeps them apart.
        p.threads = ok
        p.fetched_at = naive_utc(server_time) or utcnow()

    try:
        async with asyncio.TaskGroup() as group:
            for p in parents:
                group.create_task(one(p))
    except BaseExceptionGroup as eg:
        raise first_error(eg) from None
