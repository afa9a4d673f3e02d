"""One listed resource of a project's sync (issues, merge requests: `known.RESOURCES`): its
listing read page by page from its anchor, each page's changed parents fetched with their threads
(and a merge request's files) and committed with the cursor, then the rechecks of parents inside
GitLab's note throttle, or, for `--full`, the removal of what a complete listing left out. The
rules are sync/engine.py's docstring; `ProjectSync` (sync/engine.py) is this class with the run
around it: its record in `sync_runs`, the project, its kinds in order, the keyed kinds, the path
look-ups."""

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import NotFoundError, first_error
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.gitlab.paging import Page
from gitlab_knowledge.progress import SyncProgress
from gitlab_knowledge.store import raw
from gitlab_knowledge.sync import files, listing, redirects, writes
from gitlab_knowledge.sync.commits import Commits
from gitlab_knowledge.sync.known import Known
from gitlab_knowledge.sync.parents import Parent, fetch_threads
from gitlab_knowledge.sync.pipeline import PagePipeline
from gitlab_knowledge.sync.stats import ResourceStats, SyncResult

log = logging.getLogger(__name__)
RECHECK_BATCH = 100


class ResourceSync:
    """The listed resources' part of a project's sync; `ProjectSync` sets these attributes."""

    config: Config
    project_path: str
    full: bool
    progress: SyncProgress
    result: SyncResult
    commits: Commits
    _project_id: int | None
    _files: files.FileFetcher | None
    _paths: redirects.LinkedPaths
    _known: Known

    @property
    def project_id(self) -> int:
        """The project's GitLab id, known once `_run` has read the project."""
        if self._project_id is None:
            raise AssertionError(f"{self.project_path}: the project is not read yet")
        return self._project_id

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
