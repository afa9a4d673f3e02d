"""Fetch one project's issues, merge requests and their discussions into the raw layer.

The rules (docs/ARCHITECTURE.md, "Sync"):
- Lists are read `order_by=updated_at&sort=asc&updated_after=<anchor>` (inclusive). After each
  page the anchor moves to the page's last `updated_at` and the list is asked again from there,
  instead of following offset pages: an item updated while we paginate moves to the end of an
  offset listing and shifts the rest, which offset pagination turns into a silently skipped item.
  Offset `next` links are followed only through a run of equal timestamps longer than a page.
- GitLab orders equal timestamps arbitrarily (`reorder(updated_at: :asc)`, no tie-breaker), so
  "already have it" is decided by the stored content hash, not by id order; the cursor
  (updated_at, id) of the last committed item is the resume point.
- A changed parent gets all of its discussions refetched (a parent with `user_notes_count` 0
  needs no call), and items + threads + cursor commit in one transaction per page.
- ThrottledTouch: a note added < 60 s after the parent's last update does not move the parent's
  updated_at. A parent whose discussions were fetched no later than 60 s (+2 s margin) after its
  updated_at, by GitLab's clock, is rechecked by the next sync; once fetched later than that, any
  further note must move updated_at, so it is settled.
- `--full` lists everything, refetches every thread, and tombstones what GitLab no longer lists.
- Nothing is removed on doubt: an item is tombstoned only when its own GET answers 404 or a
  complete listing (GitLab marked its last page as the last, and every row was understood: a
  rejected row may be the stored item under an unreadable id) leaves it out. A 404 on a thread
  listing of an item GitLab still serves, a listing cut short or a page loop fail the sync.
"""

import asyncio
import contextlib
import time
from collections.abc import Collection
from datetime import timedelta

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import KnowledgeError, is_interrupt
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.progress import NullProgress, SyncProgress
from gitlab_knowledge.store import raw
from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.sync import files, redirects, releases, runs, wikis
from gitlab_knowledge.sync.commits import Commits
from gitlab_knowledge.sync.identity import refresh_identity
from gitlab_knowledge.sync.known import RESOURCES, BatchKnown, Known, read_known
from gitlab_knowledge.sync.resource import ResourceSync
from gitlab_knowledge.sync.stats import RawStats, ResourceStats, SyncResult
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace


def refresh(workspace: Workspace, project: str, *, full: bool = False, force: bool = False,
            dagster_run_id: str | None = None, progress: SyncProgress | None = None) -> SyncResult:
    """The raw layer's entry point: fetch what changed in GitLab for one project."""
    return ProjectSync(workspace, project, full=full, force=force, dagster_run_id=dagster_run_id,
                       progress=progress).run()


class ProjectSync(ResourceSync):
    """One sync of one project into the raw layer; `refresh()` above is the layer's entry point.
    Each listed resource's part is `ResourceSync`'s (sync/resource.py)."""

    def __init__(self, workspace: Workspace, project_path: str, *, full: bool = False, force: bool = False,
                 dagster_run_id: str | None = None, progress: SyncProgress | None = None,
                 siblings: Collection[str] = (), expected_id: int | None = None,
                 batch_known: BatchKnown | None = None) -> None:
        """`siblings`: the other projects synced with this one (a batch): paths its links name
        that need no look-up. `expected_id`: the project's id if known (the group listing's).
        `batch_known`: what its batch read of the store for all its projects (sync/known.py)."""
        self.workspace = workspace
        self.config = workspace.config
        self.project_path = project_path
        self.full = full
        self.force = force
        self.dagster_run_id = dagster_run_id
        self.progress = progress or workspace.progress or NullProgress()
        self.result = SyncResult(project=project_path, project_id=None, mode="full" if full else "incremental",
                                 sync_run_id=None)
        self._project_id: int | None = None
        self._files: files.FileFetcher | None = None
        self._paths = redirects.LinkedPaths(project_path, self.config.gitlab.url)
        self._siblings = siblings
        self._expected_id = expected_id
        self._batch_known = batch_known
        self._ended = False  # its end is recorded in sync_runs
        self._known = Known()
        self.commits = Commits(workspace, self._provenance,
                               lambda con: runs.heartbeat(con, self.sync_run_id, self.project_id),
                               self.config.gitlab.per_page)

    @property
    def sync_run_id(self) -> int:
        """This sync's row in `sync_runs`, known once `run` has begun it."""
        if self.result.sync_run_id is None:
            raise AssertionError(f"{self.project_path}: the sync run is not begun yet")
        return self.result.sync_run_id

    # -- entry point ------------------------------------------------------------------------

    def run(self) -> SyncResult:
        started = self._begin()
        client: GitLabClient | None = None
        try:
            client = self.workspace.gitlab()
            asyncio.run(self._run(client))
            self._finish(started, client)  # with the writes queued while the project was small
        except BaseException as exc:
            self._failed(started, client, exc)
            raise
        return self.result

    async def run_sharing(self, client: GitLabClient) -> SyncResult:
        """`run` on a loop and a client shared with other projects' syncs (sync/many.py): the
        client's rate limit and request permits are the batch's, its calls are counted for this
        project alone, and the store work between the calls is on worker threads, so the loop
        serves the other projects meanwhile. The caller records the token's user once."""
        client.counts_apart()
        started = await asyncio.to_thread(self._begin)
        try:
            await self._fetch(client, identity=False)
        except BaseException as exc:
            await asyncio.shield(asyncio.to_thread(self._failed, started, client, exc))
            raise
        try:
            # Its end commits what is still queued; an interrupt meanwhile lets it finish.
            await asyncio.shield(asyncio.to_thread(self._finish, started, client))
        except Exception as exc:  # a queued write failed: the failure is recorded instead
            await asyncio.shield(asyncio.to_thread(self._failed, started, client, exc))
            raise
        return self.result

    def _begin(self) -> float:
        self.config.token()  # fail on a missing token before anything is written
        started = time.monotonic()
        with self.workspace.write() as con, transaction(con):
            self.commits.transactions += 1
            self.result.sync_run_id = runs.begin_run(
                con, self.project_path, self.result.mode, force=self.force,
                stale_after=timedelta(minutes=self.config.sync.stale_after_minutes),
                dagster_run_id=self.dagster_run_id)
            # The project's id is most likely the one the group listing gave (`expected_id`), or
            # GitLab gave the last sync of this path: what the listings start from is read now,
            # in this transaction, and read again after `GET /projects/:path` only if GitLab
            # says otherwise (nothing else writes this project's rows meanwhile: single flight).
            guess = self._expected_id or project_id_for(con, self.project_path)
            if guess is not None:
                self._known = read_known(con, guess, full=self.full, configured=self.config.projects,
                                         batch=self._batch_known)
        return started

    def _failed(self, started: float, client: GitLabClient | None, exc: BaseException) -> None:
        if self._ended:
            return  # the end was recorded (an interrupt that came while it committed)
        self._finish(started, client, error=_describe(exc))
        # A failed step materializes nothing: the error carries what was done (API calls made,
        # items committed) to whoever reports it (`sync --json`).
        with contextlib.suppress(AttributeError, TypeError):
            exc.raw_stats = RawStats.of(self.result)  # type: ignore[attr-defined]  # any exception carries it

    def _finish(self, started: float, client: GitLabClient | None, error: str | None = None) -> None:
        """Record how the sync ended, in one transaction with the writes still queued
        (sync/commits.py): on a failure too, as the pages fetched before it were kept when each
        committed on its own."""
        self.result.duration_s = time.monotonic() - started
        if client is not None:
            self.result.client = client.stats.as_dict()
        try:
            self._end(error, queued=True)
        except Exception as exc:
            if error is None:
                raise  # the caller records the failure, with the queued writes tried once more
            if self.commits.pending:
                self.commits.drop()  # a queued write that fails again: the failure is recorded alone
                with contextlib.suppress(KnowledgeError):
                    self._end(error, queued=False)
            elif not isinstance(exc, KnowledgeError):
                raise
            # Recording a failure must not mask it; the run stays 'running' and the next sync
            # finds its process gone and marks it abandoned.

    def _end(self, error: str | None, *, queued: bool) -> None:
        with self.workspace.write() as con, transaction(con):
            self.commits.transactions += 1
            if queued:
                self.commits.settle(con)  # the counts it adds go into the stats below
            stats = self.result.as_dict()  # with whose run it was (its project's id), in one statement
            if error is None:
                runs.finish_run(con, self.sync_run_id, stats, self._project_id)
            else:
                runs.fail_run(con, self.sync_run_id, error, stats, self._project_id)
        self._ended = True

    async def _run(self, client: GitLabClient) -> None:
        client.notify = self.progress.message  # long waits for GitLab are said where the sync reports
        async with client:
            await self._fetch(client)

    async def _fetch(self, client: GitLabClient, identity: bool = True) -> None:
        project = await client.project(self.project_path)
        self._project_id = int(project["id"])
        canonical = project.get("path_with_namespace")
        if canonical and canonical != self.project_path:
            # GitLab resolved the path in another case or through a rename's redirect: the
            # store keys the project by this id (sync_runs records it), not by the path.
            self.progress.message(f"{self.project_path}: GitLab calls it {canonical} (id {self._project_id})")
        self.result.project_id = self._project_id
        self._files = files.FileFetcher(client, self._project_id, self.config.gitlab.per_page)
        if self._known.project_id != self._project_id:
            self._known = await asyncio.to_thread(self._prepare)
        self.commits.later(lambda con, prov: raw.upsert_rows(con, [raw.RawRow.for_item("project", project)], prov))
        if canonical and canonical.casefold() != self.project_path.casefold():
            # Links written with the configured (old) path name this project too.
            self.commits.later(lambda con, prov: redirects.record(con, self.project_path, project))
        if identity:
            await refresh_identity(self.workspace, client)
        for resource, kind in RESOURCES:
            stats = self.result.resources.setdefault(resource, ResourceStats())
            await self._sync_resource(client, resource, kind, stats)
            if kind == kinds.MERGE_REQUEST.name:
                await self._backfill_files(stats)
        # Kinds not shaped like an issue (kinds.KEYED_KINDS) have a step of their own.
        await wikis.sync_wiki(client, self._project_id, self.project_path,
                              self.result.resources.setdefault(wikis.RESOURCE, ResourceStats()),
                              self.commits.later, self.progress.message)
        await releases.sync_releases(client, self._project_id, self.project_path, self.config.gitlab.per_page,
                                     self.commits, self.progress,
                                     self.result.resources.setdefault(kinds.RELEASE.api_path, ResourceStats()))
        self.result.file_calls = self._files.calls
        self._paths.paths.discard(self.project_path.casefold())
        self.result.path_lookups = await redirects.look_up(
            client, self._known.paths.unknown(self._paths.paths, self._siblings), self.commits.later,
            self._known.paths)

    def _prepare(self) -> Known:
        """`read_known` in a transaction of its own, when `_begin` guessed the project's id wrong."""
        with self.workspace.write() as con, transaction(con):
            self.commits.transactions += 1
            runs.heartbeat(con, self.sync_run_id, self.project_id)  # sync_runs knows the project's id from here on
            return read_known(con, self.project_id, full=self.full, configured=self.config.projects,
                              batch=self._batch_known)

    # -- commits ----------------------------------------------------------------------------

    def _provenance(self) -> raw.Provenance:
        return raw.Provenance(project_id=self.project_id, sync_run_id=self.result.sync_run_id,
                              dagster_run_id=self.dagster_run_id, fetched_at=utcnow(),
                              fresh=self._known.fresh and self._known.project_id == self.project_id)



def _describe(exc: BaseException) -> str:
    if isinstance(exc, KnowledgeError):
        return str(exc)
    if isinstance(exc, asyncio.CancelledError) or is_interrupt(exc):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"
