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
  complete listing (GitLab marked its last page as the last) leaves it out. A 404 on a thread
  listing of an item GitLab still serves, a listing cut short or a page loop fail the sync.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import GitLabError, KnowledgeError, NotFoundError, first_error
from gitlab_knowledge.gitlab.client import GitLabClient, Page
from gitlab_knowledge.store import payloads, raw
from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.sync import files, runs
from gitlab_knowledge.sync.identity import refresh_identity
from gitlab_knowledge.sync.progress import NullProgress, SyncProgress
from gitlab_knowledge.sync.stats import RawStats, ResourceStats, SyncResult
from gitlab_knowledge.timeutil import naive_utc, parse_time, utcnow
from gitlab_knowledge.workspace import Workspace

log = logging.getLogger(__name__)
RESOURCES = tuple((k.api_path, k.name) for k in kinds.ITEM_KINDS)  # (GitLab collection, store kind)
THROTTLE_WINDOW_SECONDS = 60 + 2
RECHECK_BATCH = 100


def refresh(workspace: Workspace, project: str, *, full: bool = False, force: bool = False,
            dagster_run_id: str | None = None, progress: SyncProgress | None = None) -> SyncResult:
    """The raw layer's entry point: fetch what changed in GitLab for one project."""
    return ProjectSync(workspace, project, full=full, force=force, dagster_run_id=dagster_run_id,
                       progress=progress).run()


@dataclass
class _Parent:
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


class ProjectSync:
    """One sync of one project into the raw layer; `refresh()` below is the layer's entry point."""

    def __init__(self, workspace: Workspace, project_path: str, *, full: bool = False, force: bool = False,
                 dagster_run_id: str | None = None, progress: SyncProgress | None = None) -> None:
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

    # -- entry point ------------------------------------------------------------------------

    def run(self) -> SyncResult:
        self.config.token()  # fail on a missing token before anything is written
        started = time.monotonic()
        with self.workspace.write() as con, transaction(con):
            self.result.sync_run_id = runs.begin_run(
                con, self.project_path, self.result.mode, force=self.force,
                stale_after=timedelta(minutes=self.config.sync.stale_after_minutes),
                dagster_run_id=self.dagster_run_id)
        client: GitLabClient | None = None
        try:
            client = self.workspace.gitlab()
            asyncio.run(self._run(client))
        except BaseException as exc:
            self._finish(started, client, error=_describe(exc))
            # A failed step materializes nothing: the error carries what was done (API calls made,
            # items committed) to whoever reports it (`sync --json`).
            with contextlib.suppress(AttributeError, TypeError):
                exc.raw_stats = RawStats.of(self.result)  # type: ignore[union-attr]
            raise
        self._finish(started, client)
        return self.result

    def _finish(self, started: float, client: GitLabClient | None, error: str | None = None) -> None:
        self.result.duration_s = time.monotonic() - started
        if client is not None:
            self.result.client = client.stats.as_dict()
        stats = self.result.as_dict()
        try:
            with self.workspace.write() as con, transaction(con):
                if error is None:
                    runs.finish_run(con, self.result.sync_run_id, stats)
                else:
                    runs.fail_run(con, self.result.sync_run_id, error, stats)
        except KnowledgeError:
            if error is None:
                raise
            # Recording a failure must not mask it; the run stays 'running' and the next
            # sync finds its process gone and marks it abandoned.

    async def _run(self, client: GitLabClient) -> None:
        client.notify = self.progress.message  # long waits for GitLab are said where the sync reports
        async with client:
            project = await client.project(self.project_path)
            self._project_id = int(project["id"])
            canonical = project.get("path_with_namespace")
            if canonical and canonical != self.project_path:
                # GitLab resolved the path in another case or through a rename's redirect: the
                # store keys the project by this id (sync_runs records it), not by the path.
                self.progress.message(f"{self.project_path}: GitLab calls it {canonical} (id {self._project_id})")
            self.result.project_id = self._project_id
            self._files = files.FileFetcher(client, self._project_id, self.config.gitlab.per_page)
            self._commit(lambda con, prov: raw.upsert_rows(con, [raw.RawRow.for_item("project", project)], prov))
            await refresh_identity(self.workspace, client)
            for resource, kind in RESOURCES:
                stats = self.result.resources.setdefault(resource, ResourceStats())
                await self._sync_resource(client, resource, kind, stats)
                if kind == kinds.MERGE_REQUEST.name:
                    await self._backfill_files(stats)
            self.result.file_calls = self._files.calls

    # -- one resource -----------------------------------------------------------------------

    async def _sync_resource(self, client: GitLabClient, resource: str, kind: str, stats: ResourceStats) -> None:
        path = f"/projects/{self._project_id}/{resource}"
        with self.workspace.write() as con:
            cursor = con.execute(
                "SELECT updated_at_cursor, tie_breaker_id FROM sync_cursors WHERE project_id = ? AND resource_type = ?",
                [self._project_id, kind]).fetchone()
            known = dict(con.execute(
                "SELECT CAST(gitlab_key AS BIGINT), payload_hash FROM raw_payloads "
                "WHERE project_id = ? AND resource_type = ? AND deleted_at IS NULL",
                [self._project_id, kind]).fetchall())
        anchor = cursor[0] if cursor and not self.full else None
        best = (parse_time(cursor[0]), int(cursor[1])) if cursor and cursor[0] else None
        done: dict[int, str] = {}  # id -> hash examined during this run
        refetched: set[int] = set()  # parents whose threads this run fetched (or knew to be none)
        seen: set[int] = set()
        read: set[str] = set()  # page URLs of this listing, to catch a loop
        first = True
        # A two-stage pipeline, because at a rate limit every moment the client asks for nothing
        # is lost: the next list page is requested as soon as this one arrives (its anchor depends
        # on this page alone), and page k commits on a worker thread while page k+1's threads are
        # fetched. Commits stay strictly in page order, one at a time, so the store and the cursor
        # move exactly as in a sequential sync, and a kill -9 finds the same states.
        listing: asyncio.Task[Page] | None = asyncio.create_task(self._list_page(client, path, None, anchor))
        committing: asyncio.Future[None] | None = None
        pending: tuple[list[_Parent], int] = ([], 0)  # the committing page's parents and item count

        async def settle() -> None:
            await committing
            parents, count = pending
            for p in parents:
                refetched.add(p.gitlab_id)
                if p.threads is not None:
                    known[p.gitlab_id] = done[p.gitlab_id]
            self.progress.advance(self.project_path, resource, count)

        try:
            while listing is not None:
                page, listing = await listing, None
                client.record_page(page, read)
                stats.list_calls += 1
                if first:
                    self.progress.resource_started(self.project_path, resource, page.total)
                    first = False
                if not page.items:
                    break
                # A rejected item is still listed: --full must not take it for deleted.
                seen.update(it["id"] for it in page.items if isinstance(it, dict) and isinstance(it.get("id"), int))
                items = payloads.screen_items(kinds.kind(kind).display.lower(), page.items,
                                              lambda line: self._reject(stats, line))
                if not items:
                    # Every item of the page was rejected: nothing to anchor on, take GitLab's next page.
                    if page.next_url:
                        listing = asyncio.create_task(self._list_page(client, path, page.next_url, anchor))
                    continue
                items = sorted(items,
                               key=lambda it: (parse_time(it.get("updated_at")) or datetime.min, int(it["id"])))
                stats.listed += len(items)
                seen.update(int(it["id"]) for it in items)
                wanted = []
                for it in items:
                    digest = raw.payload_hash(raw.canonical_json(it))
                    if done.get(int(it["id"])) == digest:
                        continue
                    if self.full or known.get(int(it["id"])) != digest:
                        wanted.append(it)
                    done[int(it["id"])] = digest
                last = items[-1]
                if page.next_url:
                    if anchor is not None and parse_time(last["updated_at"]) == parse_time(anchor):
                        url = page.next_url  # a run of equal timestamps longer than a page
                    else:
                        anchor, url = last["updated_at"], None
                    listing = asyncio.create_task(self._list_page(client, path, url, anchor))
                parents = await self._fetch_parents(client, kind, wanted, page)
                last_key = (parse_time(last["updated_at"]), int(last["id"]))
                new_cursor = last if best is None or last_key > best else None
                if new_cursor is not None:
                    best = last_key
                if committing is not None:
                    await settle()
                committing = asyncio.ensure_future(asyncio.to_thread(
                    self._commit_parents, kind, resource, parents, stats, new_cursor))
                pending = (parents, len(items))
            if committing is not None:
                await settle()
                committing = None
        finally:
            if listing is not None:
                listing.cancel()
                await asyncio.wait([listing])
            if committing is not None:
                # A commit on its thread cannot be cancelled; whatever brought us here propagates
                # once it has finished, and its own failure, if any, is not left unretrieved.
                await asyncio.wait([committing])
                if not committing.cancelled():
                    committing.exception()
        if self.full:
            # Removal follows from a complete listing only: GitLab must have marked its end.
            client.check_complete(page)
            await self._reconcile(kind, resource, seen, stats)
        else:
            await self._recheck(client, kind, resource, refetched, stats)

    async def _list_page(self, client: GitLabClient, path: str, url: str | None, anchor: str | None) -> Page:
        if url:
            return await client.get_page(url)
        params = {"order_by": "updated_at", "sort": "asc", "per_page": self.config.gitlab.per_page,
                  "updated_after": anchor}
        return await client.get_page(path, params)

    async def _fetch_parents(self, client: GitLabClient, kind: str, items: Sequence[dict[str, Any]],
                             page: Page) -> list[_Parent]:
        parents = [_Parent(kind, int(it["id"]), int(it["iid"]), it) for it in items]
        with_notes = [p for p in parents if int(p.item.get("user_notes_count") or 0) > 0]
        if kind == kinds.MERGE_REQUEST.name:
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._fetch_threads(client, with_notes))
                    group.create_task(self._fetch_files(parents))
            except BaseExceptionGroup as eg:
                raise first_error(eg) from None
        else:
            await self._fetch_threads(client, with_notes)
        for p in parents:
            if p.fetched_at is None and p.threads is None and int(p.item.get("user_notes_count") or 0) == 0:
                # No user notes: nothing to fetch, and the list page's time is what we know them by.
                p.threads, p.fetched_at = [], naive_utc(page.server_time) or utcnow()
        return parents

    async def _fetch_threads(self, client: GitLabClient, parents: Sequence[_Parent]) -> None:
        if not parents:
            return
        resource = {k.name: k.api_path for k in kinds.ITEM_KINDS}

        async def one(p: _Parent) -> None:
            item = f"/projects/{self._project_id}/{resource[p.kind]}/{p.iid}"
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
                lambda line: self._reject(self.result.resources[resource[p.kind]], line))
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

    async def _fetch_files(self, parents: Sequence[_Parent]) -> None:
        for p, got in zip(parents, await self._files.fetch_all([p.iid for p in parents]), strict=True):
            p.files = got
            if got is None:
                log.warning("%s: GitLab serves no file list for !%d; history will not know its files",
                            self.project_path, p.iid)

    async def _backfill_files(self, stats: ResourceStats) -> None:
        """MRs stored without a file list (stores from before file lists, or a fetch GitLab
        refused last time) get theirs, in batches that each commit."""
        with self.workspace.write() as con:
            items = files.missing_file_lists(con, self._project_id)
        if items:
            self.progress.message(f"{self.project_path}: fetching the file lists of {len(items)} merge requests")
        for start in range(0, len(items), RECHECK_BATCH):
            batch = [_Parent(kinds.MERGE_REQUEST.name, int(it["id"]), int(it["iid"]), it)
                     for it in items[start:start + RECHECK_BATCH]]
            await self._fetch_files(batch)
            rows = [files.raw_row(p.item, p.files) for p in batch if p.files is not None]
            self._commit(lambda con, prov, rows=rows: raw.upsert_rows(con, rows, prov))
            stats.file_fetches += len(rows)

    def _reject(self, stats: ResourceStats, line: str) -> None:
        """A payload the store cannot hold: one line naming it; the rest of its page goes on."""
        stats.rejected += 1
        self.progress.message(f"{self.project_path}: {line}")
        log.warning("%s: %s", self.project_path, line)

    # -- commits ----------------------------------------------------------------------------

    def _provenance(self) -> raw.Provenance:
        return raw.Provenance(project_id=self._project_id, sync_run_id=self.result.sync_run_id,
                              dagster_run_id=self.dagster_run_id, fetched_at=utcnow())

    def _commit(self, work: Callable[[Any, raw.Provenance], Any]) -> Any:
        with self.workspace.write() as con, transaction(con):
            out = work(con, self._provenance())
            runs.heartbeat(con, self.result.sync_run_id, self._project_id)
            return out

    def _commit_parents(self, kind: str, resource: str, parents: Sequence[_Parent], stats: ResourceStats,
                        cursor_item: dict[str, Any] | None) -> None:
        alive = [p for p in parents if p.threads is not None]
        gone = [p.gitlab_id for p in parents if p.threads is None]

        def work(con: Any, prov: raw.Provenance) -> None:
            items = [raw.RawRow.for_item(kind, p.item, p.fetched_at) for p in alive if p.item is not None]
            counts = raw.upsert_rows(con, items, prov)
            file_rows = [files.raw_row(p.item, p.files) for p in alive if p.item is not None and p.files is not None]
            raw.upsert_rows(con, file_rows, prov)
            stats.file_fetches += len(file_rows)
            rechecked = [p for p in alive if p.recheck]
            unchanged = [p for p in rechecked if p.item is None]
            if unchanged:
                con.executemany(
                    "UPDATE raw_payloads SET discussions_fetched_at = ? WHERE resource_type = ? AND gitlab_key = ?",
                    [[p.fetched_at, kind, str(p.gitlab_id)] for p in unchanged])
            threads = raw.replace_discussions(
                con, [raw.ParentDiscussions(kind, p.gitlab_id, p.threads, p.kept, p.keep_all) for p in alive], prov)
            deleted = raw.tombstone_parents(con, kind, gone)
            if cursor_item is not None:
                con.execute("""
                    INSERT OR REPLACE INTO sync_cursors
                        (project_id, resource_type, updated_at_cursor, tie_breaker_id, moved_at, sync_run_id)
                    VALUES (?, ?, ?, ?, ?, ?)
                """, [self._project_id, kind, cursor_item["updated_at"], int(cursor_item["id"]), utcnow(),
                      self.result.sync_run_id])
            stats.fetched += len(items)
            stats.new += counts.new
            stats.updated += counts.updated
            stats.deleted += deleted
            stats.discussion_fetches += sum(1 for p in alive if p.recheck or int(p.item.get("user_notes_count") or 0) > 0)
            stats.rechecked += len(rechecked)
            stats.threads_new += threads.new
            stats.threads_updated += threads.updated
            stats.threads_deleted += threads.deleted

        self._commit(work)

    async def _recheck(self, client: GitLabClient, kind: str, resource: str, done: set[int],
                       stats: ResourceStats) -> None:
        with self.workspace.write() as con:
            candidates = raw.recheck_candidates(con, self._project_id, kind, THROTTLE_WINDOW_SECONDS)
        candidates = [(gid, iid) for gid, iid in candidates if gid not in done]
        if candidates:
            self.progress.message(f"{self.project_path}: rechecking {len(candidates)} {resource} "
                                  "updated within GitLab's 60 s note throttle")
        for start in range(0, len(candidates), RECHECK_BATCH):
            batch = [_Parent(kind, gid, iid, None, recheck=True) for gid, iid in candidates[start:start + RECHECK_BATCH]]
            await self._fetch_threads(client, batch)
            with self.workspace.write() as con:
                stored = raw.stored_thread_signatures(con, kind, [p.gitlab_id for p in batch])
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
        def work(con: Any, prov: raw.Provenance) -> int:
            missing = sorted(raw.live_parent_ids(con, self._project_id, kind) - seen)
            return raw.tombstone_parents(con, kind, missing)

        removed = self._commit(work)
        stats.deleted += removed
        if removed:
            self.progress.message(f"{self.project_path}: {removed} {resource} no longer in GitLab, removed")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KnowledgeError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"

