"""A GitLab users' server (`[mcp] auth = "gitlab"`) learns confidential flips between syncs.

The store learns that an issue was made confidential at the next sync of its project (the sensor's
interval). A shared server cannot wait that long: GitLab hides the issue from Guests at once. So,
at most every `auth_cache_seconds` (the bound a revoked token or a removed membership keeps too),
before it answers a request, the server asks GitLab with the sync's token, per synced project,
for the confidential issues updated since the project's stored issue cursor:

    GET /projects/:id/issues?confidential=true&updated_after=<cursor>&order_by=updated_at&sort=asc&per_page=100

A flip bumps the issue's `updated_at`, so one made since the sync is in that list; one made before
it is in the store already. The cursor is taken a day early (CURSOR_MARGIN): after the sync that
stores the flag, the issue stays in the overlay while the documents and indexes catch up (they are
built after the sync), which the lens and the index scope would otherwise read as public. The cost per interval is one call per synced project (plus one per
further 100 confidential issues updated since its last sync), whatever the number of issues
(docs/gitlab-api-confidential.md). The answer goes to the reader's overlay (store/overlay.py),
which every viewer's lens and index scope read at once; nothing is written to the store.

When a project cannot be checked (GitLab down, the sync's token refused, the project gone) the
last answer for it stays, one line is logged (no token) and the next interval asks again; until
a check of it succeeds the project is out of sight for users who do not see its confidential
issues (fail closed: a flip there would go unseen). GitLab down altogether also stops the auth
look-ups, so within the same bound every client is answered 503.
"""

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import GitLabError, KnowledgeError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.redact import redact
from gitlab_knowledge.store.reader import StoreReader

PER_PAGE = 100
CHECK_RETRIES = 1  # requests wait on a due check: one retry, then the project counts as unchecked
STORE_WAIT_SECONDS = 0.5
CURSOR_MARGIN = timedelta(days=1)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Watched:
    """A stored project and its issue cursor (GitLab's `updated_at` string the sync read up to)."""

    project_id: int
    updated_after: str | None


def watched_projects(reader: StoreReader, wait: float = STORE_WAIT_SECONDS) -> list[Watched]:
    """The store's projects with their issue cursors (read without a lens: the server's own read)."""
    with reader.read(wait) as con:
        rows = con.execute("SELECT p.id, c.updated_at_cursor FROM projects p LEFT JOIN sync_cursors c "
                           "ON c.project_id = p.id AND c.resource_type = ? ORDER BY p.id",
                           [kinds.ISSUE.name]).fetchall()
    return [Watched(int(pid), cursor) for pid, cursor in rows]


def since(cursor: str) -> str:
    """`cursor` less CURSOR_MARGIN, in GitLab's form (the cursor as is if it is not a time)."""
    try:
        moment = datetime.fromisoformat(cursor.replace("Z", "+00:00"))
    except ValueError:
        return cursor
    return (moment - CURSOR_MARGIN).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_params(project: Watched) -> dict[str, object]:
    """The list query of one project's check (GitLab's `updated_after` is inclusive)."""
    params: dict[str, object] = {"confidential": "true", "order_by": "updated_at", "sort": "asc",
                                 "per_page": PER_PAGE}
    if project.updated_after:
        params["updated_after"] = since(project.updated_after)
    return params


class ConfidentialCheck:
    """One check: ask GitLab for each stored project's confidential issues, update the overlay."""

    def __init__(self, config: Config, reader: StoreReader, token: str,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if reader.overlay is None:
            raise ValueError("the reader has no overlay to write confidential flips to")
        self._settings = dataclasses.replace(config.gitlab, max_retries=min(config.gitlab.max_retries, CHECK_RETRIES),
                                             rate_limit=0)
        self._reader = reader
        self._overlay = reader.overlay
        self._token = token
        self._transport = transport
        self._projects: list[Watched] | None = None  # as last read: cursors only move forward

    async def __call__(self) -> None:
        try:
            self._projects = await asyncio.to_thread(watched_projects, self._reader)
        except KnowledgeError as exc:
            if self._projects is None:  # nothing stored yet, or a sync holds the store: nothing to hide
                log.warning("confidential check: could not read the store (%s)", redact(str(exc)))
                return
        projects = self._projects
        if not projects:
            self._overlay.update({}, frozenset())
            return
        async with GitLabClient(self._settings, self._token, transport=self._transport) as gl:
            answers = await asyncio.gather(*(self._one(gl, p) for p in projects), return_exceptions=True)
        checked: dict[int, frozenset[int]] = {}
        failed: dict[int, BaseException] = {}
        for project, answer in zip(projects, answers, strict=True):
            if isinstance(answer, frozenset):
                checked[project.project_id] = answer
            elif isinstance(answer, GitLabError | KnowledgeError | OSError):
                failed[project.project_id] = answer
            else:
                raise answer  # a bug, not GitLab
        self._overlay.update(checked, frozenset(failed))
        if failed:
            first = next(iter(failed.values()))
            log.warning("confidential check: %d of %d projects not checked (%s); below Planner they stay out of "
                        "sight until a check succeeds, next in one interval", len(failed), len(projects),
                        redact(str(first)))

    async def _one(self, gl: GitLabClient, project: Watched) -> frozenset[int]:
        rows, _ = await gl.get_all(f"/projects/{project.project_id}/{kinds.ISSUE.api_path}", check_params(project))
        return frozenset(int(r["id"]) for r in rows if r.get("confidential"))


class ConfidentialWatch:
    """Runs `check` before a request when the last one started `seconds` ago or more (or never):
    concurrent requests share one check; a failed check is not retried before the next interval."""

    def __init__(self, check: Callable[[], Awaitable[None]], seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._check = check
        self._seconds = seconds
        self._clock = clock
        self._due: float | None = None
        self._pending: asyncio.Future[None] | None = None

    async def fresh(self) -> None:
        """Return once what the overlay says is at most `seconds` old (checking first if due)."""
        if self._due is not None and self._clock() < self._due:
            return
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._run(self._clock()))
        await asyncio.shield(self._pending)

    async def _run(self, started: float) -> None:
        try:
            await self._check()
        finally:
            self._due = started + self._seconds
            self._pending = None
