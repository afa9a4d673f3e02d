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
import functools
import logging
import time
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import KnowledgeError, NotFoundError, first_error
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.gitlab.paging import Page
from gitlab_knowledge.progress import NullProgress, SyncProgress
from gitlab_knowledge.store import raw
from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.sync import files, listing, redirects, releases, runs, wikis, writes
from gitlab_knowledge.sync.commits import Commits
from gitlab_knowledge.sync.identity import refresh_identity
from gitlab_knowledge.sync.known import RESOURCES, Known, read_known
from gitlab_knowledge.sync.parents import Parent, fetch_threads
from gitlab_knowledge.sync.pipeline import PagePipeline
from gitlab_knowledge.sync.stats import RawStats, ResourceStats, SyncResult
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

log = logging.getLogger(__name__)
RECHECK_BATCH = 100


def refresh(workspace: Workspace, project: str, *, full: bool = False, force: bool = False,
            dagster_run_id: str | None = None, progress: SyncProgress | None = None) -> SyncResult:
    """The raw layer's entry point: fetch what changed in GitLab for one project."""
    return ProjectSync(workspace, project, full=full, force=force, dagster_run_id=dagster_run_id,
                       progress=progress).run()


class ProjectSync:
    """One sync of one project into the raw layer; `refresh()` below is the layer's entry point."""

    def __init__(self, workspace: Workspace, project_path: str, *, full: bool = False, force: bool = False,
                 dagster_run_id: str | None = None, progress: SyncProgress | None = None,
                 siblings: Collection[str] = (), expected_id: int | None = None) -> None:
        """`siblings`: the other projects synced with this one (a batch): paths its links name
        that need no look-up. `expected_id`: the project's id if known (the group listing's)."""
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
        self._ended = False  # its end is recorded in sync_runs
        self._known = Known()
        self.commits = Commits(workspace, self._provenance,
                               lambda con: runs.heartbeat(con, self.sync_run_id, self.project_id),
                               self.config.gitlab.per_page)

    @property
    def project_id(self) -> int:
        """The project's GitLab id, known once `_run` has read the project."""
        if self._project_id is None:
            raise AssertionError(f"{self.project_path}: the project is not read yet")
        return self._project_id

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
                self._known = read_known(con, guess, full=self.full, configured=self.config.projects)
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
            client, self._known.paths.unknown(self._paths.paths, self._siblings), self.commits.later)

    def _prepare(self) -> Known:
        """`read_known` in a transaction of its own, when `_begin` guessed the project's id wrong."""
        with self.workspace.write() as con, transaction(con):
            self.commits.transactions += 1
            runs.heartbeat(con, self.sync_run_id, self.project_id)  # sync_runs knows the project's id from here on
            return read_known(con, self.project_id, full=self.full, configured=self.config.projects)

    # -- one resource -----------------------------------------------------------------------

    async def _sync_resource(self, client: GitLabClient, resource: str, kind: str, stats: ResourceStats) -> None:
        state = self._known.states[kind]
        page = await self._read_listing(client, resource, kind, stats, state)
        if self.full:
            # Removal follows from a complete listing only: GitLab must have marked its end.
            client.check_complete(page)
            if state.rejected:
                self._keep_unlisted(resource, state.rejected)
            else:
                await self._reconcile(kind, resource, state.seen, stats)
        else:
            await self._recheck(client, kind, resource, state.refetched, stats)

    async def _read_listing(self, client: GitLabClient, resource: str, kind: str, stats: ResourceStats,
                            state: listing.ListingState) -> Page:
        """Every page of the listing through the two-stage pipeline (sync/pipeline.py); returns
        the last page read."""
        path, per_page = f"/projects/{self._project_id}/{resource}", self.config.gitlab.per_page

        def request(url: str | None) -> asyncio.Task[Page]:
            return asyncio.create_task(listing.list_page(client, path, per_page, url, state.anchor))

        pipeline = PagePipeline(request(None))
        first = True
        try:
            while pipeline.listing is not None:
                page = await pipeline.next_page()
                client.record_page(page, state.read)
                stats.list_calls += 1
                if first:
                    self.progress.resource_started(self.project_path, resource, page.total)
                    first = False
                if not page.items:
                    break
                items = listing.screen_page(state, page, kind, lambda line: self._reject(stats, line))
                if not items:
                    # Every item of the page was rejected: nothing to anchor on, take GitLab's next page.
                    if page.next_url:
                        pipeline.request(request(page.next_url))
                    continue
                stats.listed += len(items)
                if page.next_url:
                    pipeline.request(request(listing.follow(state, page, items[-1])))
                await self._take_page(client, resource, kind, stats, state, page, items, pipeline)
            await pipeline.settle()
        finally:
            await pipeline.close()
        return page

    async def _take_page(self, client: GitLabClient, resource: str, kind: str, stats: ResourceStats,
                         state: listing.ListingState, page: Page, items: list[dict[str, Any]],
                         pipeline: PagePipeline) -> None:
        """Fetch the page's changed items and queue their commit, with the cursor if it moves."""
        wanted = listing.changed(state, items, self.full)
        parents = await self._fetch_parents(client, kind, wanted)
        first_cursor = state.best is None
        cursor_item = listing.moves_cursor(state, items[-1])

        def settled() -> None:
            listing.committed(state, parents)
            self.progress.advance(self.project_path, resource, len(items))

        await pipeline.commit(functools.partial(self._commit_parents, kind, resource, parents, stats, cursor_item,
                                                first_cursor=first_cursor), settled)

    async def _fetch_parents(self, client: GitLabClient, kind: str, items: Sequence[dict[str, Any]]) -> list[Parent]:
        # Every changed parent's threads, also of one nobody commented on: GitLab writes its links
        # ("closed via merge request !12", "moved to g/p#3", "marked this issue as blocking #4")
        # and "approved this merge request" as system notes, which `user_notes_count` does not count.
        parents = [Parent(kind, int(it["id"]), int(it["iid"]), it) for it in items]
        if kind == kinds.MERGE_REQUEST.name:
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._fetch_threads(client, parents))
                    group.create_task(self._fetch_files(parents))
            except BaseExceptionGroup as eg:
                raise first_error(eg) from None
        else:
            await self._fetch_threads(client, parents)
        self._paths.read(parents)
        return parents

    async def _fetch_threads(self, client: GitLabClient, parents: Sequence[Parent]) -> None:
        await fetch_threads(client, self.project_id, parents,
                            lambda resource, line: self._reject(self.result.resources[resource], line))

    async def _fetch_files(self, parents: Sequence[Parent]) -> None:
        assert self._files is not None  # set by _run before any listing
        for p, got in zip(parents, await self._files.fetch_all([p.iid for p in parents]), strict=True):
            p.files = got
            if got is None:
                log.warning("%s: GitLab serves no file list for !%d; history will not know its files",
                            self.project_path, p.iid)

    async def _backfill_files(self, stats: ResourceStats) -> None:
        """MRs stored without a file list (stores from before file lists, or a fetch GitLab
        refused last time) get theirs, in batches that each commit (while the project is small,
        with its end)."""
        listed = self._known.states[kinds.MERGE_REQUEST.name].refetched
        items = [it for it in self._known.without_files if int(it["id"]) not in listed]
        if items:
            self.progress.message(f"{self.project_path}: fetching the file lists of {len(items)} merge requests")
        for start in range(0, len(items), RECHECK_BATCH):
            batch = [Parent(kinds.MERGE_REQUEST.name, int(it["id"]), int(it["iid"]), it)
                     for it in items[start:start + RECHECK_BATCH]]
            await self._fetch_files(batch)
            rows = [files.raw_row(p.listed, p.files) for p in batch if p.files is not None]
            self.commits.later(lambda con, prov, rows=rows: raw.upsert_rows(con, rows, prov), len(rows))
            stats.file_fetches += len(rows)

    def _reject(self, stats: ResourceStats, line: str) -> None:
        """A payload the store cannot hold: one line naming it; the rest of its page goes on."""
        stats.rejected += 1
        self.progress.warning(f"{self.project_path}: {line}")

    # -- commits ----------------------------------------------------------------------------

    def _provenance(self) -> raw.Provenance:
        return raw.Provenance(project_id=self.project_id, sync_run_id=self.result.sync_run_id,
                              dagster_run_id=self.dagster_run_id, fetched_at=utcnow(),
                              fresh=self._known.fresh and self._known.project_id == self.project_id)

    def _commit_parents(self, kind: str, resource: str, parents: Sequence[Parent], stats: ResourceStats,
                        cursor_item: dict[str, Any] | None, *, first_cursor: bool = False) -> None:
        """A page's (or a recheck batch's) parents with the cursor: one transaction, or queued
        for the sync's end while the project is small (sync/commits.py)."""
        self.commits.later(lambda con, prov: writes.write_parents(con, prov, kind, parents, stats, cursor_item,
                                                                  first_cursor=first_cursor), len(parents))

    async def _recheck(self, client: GitLabClient, kind: str, resource: str, done: set[int],
                       stats: ResourceStats) -> None:
        candidates = [(gid, iid) for gid, iid in self._known.rechecks.get(kind, ()) if gid not in done]
        if candidates:
            self.progress.message(f"{self.project_path}: rechecking {len(candidates)} {resource} "
                                  "updated within GitLab's 60 s note throttle")
        for start in range(0, len(candidates), RECHECK_BATCH):
            batch = [Parent(kind, gid, iid, None, recheck=True) for gid, iid in candidates[start:start + RECHECK_BATCH]]
            await self._fetch_threads(client, batch)
            self._paths.read(batch)
            stored = self._known.signatures.get(kind, {})
            # Threads changed under an unchanged updated_at: the parent's own payload is stale too
            # (user_notes_count), so it is refetched, once, for those parents only.
            for p in batch:
                if p.threads is not None and raw.thread_signature(p.threads) != stored.get(p.gitlab_id):
                    try:
                        p.item = await client.get(f"/projects/{self._project_id}/{resource}/{p.iid}")
                    except NotFoundError:
                        p.threads = None
            self._commit_parents(kind, resource, batch, stats, None)

    async def _reconcile(self, kind: str, resource: str, seen: set[int], stats: ResourceStats) -> None:
        def remove(con: Any, prov: raw.Provenance) -> None:
            removed = writes.remove_unlisted(con, self.project_id, kind, seen)
            stats.deleted += removed
            if removed:
                self.progress.message(f"{self.project_path}: {removed} {resource} no longer in GitLab, removed")

        self.commits.later(remove)

    def _keep_unlisted(self, resource: str, rejected: int) -> None:
        line = (f"{self.project_path}: {resource} listing incomplete ({rejected} rejected "
                f"row{'s' if rejected != 1 else ''}): nothing removed as no longer in GitLab on this run")
        self.progress.warning(line)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KnowledgeError):
        return str(exc)
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"

