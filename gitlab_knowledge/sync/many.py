"""Several projects' raw fetches at once: what a batch run (defs/many_projects.py) fetches with.

A project's sync is ~10-14 GitLab calls one after another even when nothing changed (the project,
each listing, the wiki, the releases, the redirect look-ups), each a round trip the client spends
waiting; a batch that fetched its projects one by one paid those waits end to end (2.8 s a
project in the 200-project drill). Here up to `sync.projects_in_flight` projects fetch at once on
one event loop, through one client, so its rate limit and request permits bound the whole batch
as they bound one sync. Each project's sync keeps every rule of the raw layer (sync/engine.py:
its cursor and anchors, a commit per page, its own `sync_runs` row and its own call counts).

The loop runs on a thread of its own; the batch's thread takes each project as its fetch lands
(`landed`) and carries it through the store layers meanwhile. Writes to the store are one at a
time across both (`store.db.one_writer`, entered by the caller). A project whose fetch fails
lands with its error and the others go on; a failure that is not about one project (`STOP_ALL`:
auth, config, a store that cannot be written) cancels the fetches in flight and starts no more.
`close` (also on an interrupt of the batch's thread) cancels what is in flight and waits for it:
each cancelled sync records its run as failed, and a page commit in progress finishes first.
"""

import asyncio
import contextlib
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gitlab_knowledge.errors import AuthError, ConfigError, StoreError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.progress import SyncProgress
from gitlab_knowledge.store import groups as record_store
from gitlab_knowledge.sync.engine import ProjectSync
from gitlab_knowledge.sync.identity import refresh_identity
from gitlab_knowledge.sync.known import BatchKnown, read_batch_known
from gitlab_knowledge.sync.stats import SyncResult
from gitlab_knowledge.workspace import Workspace

STOP_ALL = (AuthError, ConfigError, StoreError)
_POLL_S = 0.2  # how often the waiting batch thread looks up, so an interrupt reaches it


@dataclass
class Landed:
    """One project's fetch, done: its result, or the error it ended with."""

    project: str
    result: SyncResult | None = None
    error: BaseException | None = None


class Fetches:
    """The raw fetches of `projects`, at most `in_flight` at once, started by `start`."""

    def __init__(self, workspace: Workspace, projects: Sequence[str], *, in_flight: int, full: bool = False,
                 force: bool = False, run_id: str | None = None, progress: SyncProgress | None = None) -> None:
        self.workspace = workspace
        self.projects = list(projects)
        self.in_flight = max(1, in_flight)
        self.full, self.force, self.run_id, self.progress = full, force, run_id, progress
        self._landed: queue.Queue[Landed] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._serve, name="gitlab-fetches", daemon=True)
        self._ready = threading.Event()
        self._stopping = False
        self._ids: dict[str, int] = {}  # project path -> id, as the group listing gave them
        self._known: BatchKnown | None = None  # what the store says for all of them, read once
        self.error: BaseException | None = None  # what ended the fetches before every project landed, if anything

    def start(self) -> "Fetches":
        self._thread.start()
        self._ready.wait()
        return self

    def landed(self) -> Iterator[Landed]:
        """Each project as its fetch lands (an error included), until every one has; the projects a
        stop left unfetched do not land."""
        while True:
            try:
                item = self._landed.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._landed.empty():
                    return
                continue
            yield item

    def landed_meanwhile(self) -> list[Landed]:
        """The projects that have landed and not been taken by `landed` yet, without waiting: the
        batch's store layers take them in one pass (defs/many_projects.py)."""
        out: list[Landed] = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._landed.get_nowait())
        return out

    def landed_more(self, wanted: int) -> list[Landed]:
        """Up to `wanted` more projects, waiting for them to land, or fewer when the fetches end
        first (every project landed, or a stop): the batch's store layers take them in one pass."""
        out: list[Landed] = []
        while len(out) < wanted:
            try:
                out.append(self._landed.get(timeout=_POLL_S))
            except queue.Empty:
                if not self._thread.is_alive() and self._landed.empty():
                    break
        return out

    def close(self) -> None:
        """Cancel the fetches in flight and wait until each has recorded how it ended."""
        self._stopping = True
        loop, main = self._loop, self._main
        if loop is not None and main is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(main.cancel)
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> "Fetches":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's thread ------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            asyncio.run(self._all())
        except asyncio.CancelledError:
            pass  # a stop: the failure that asked for it has landed, or the batch's thread closed us
        except BaseException as exc:  # noqa: BLE001 - not one project's: the batch's thread reports it
            self.error = exc
        finally:
            self._ready.set()

    async def _all(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        self._ready.set()
        if self._stopping:
            return
        client = self.workspace.gitlab()
        if self.progress is not None:
            client.notify = self.progress.message
        slots = asyncio.Semaphore(self.in_flight)
        self._ids = _listed_ids(self.workspace)
        self._known = await asyncio.to_thread(_batch_known, self.workspace)
        async with client:
            # The token's user once for the batch, not once per project (at most hourly anyway).
            await refresh_identity(self.workspace, client)
            tasks = [asyncio.create_task(self._one(client, slots, project)) for project in self.projects]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, client: GitLabClient, slots: asyncio.Semaphore, project: str) -> None:
        async with slots:
            if self._stopping:
                return
            sync = ProjectSync(self.workspace, project, full=self.full, force=self.force,
                               dagster_run_id=self.run_id, progress=self.progress, siblings=self.projects,
                               expected_id=self._ids.get(project), batch_known=self._known)
            try:
                result = await sync.run_sharing(client)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - each project's failure lands with it
                self._landed.put(Landed(project, error=exc))
                if isinstance(exc, STOP_ALL) or not isinstance(exc, Exception):
                    self._stopping = True
                    if self._main is not None:
                        self._main.cancel()
                return
            self._landed.put(Landed(project, result=result))


def _batch_known(workspace: Workspace) -> BatchKnown | None:
    """What every project's begin would read of the store, read once (sync/known.py); None if the
    store cannot be read now (each project reads its own then, and says why if it cannot)."""
    try:
        with workspace.write() as con:
            return read_batch_known(con, workspace.config.projects)
    except StoreError:
        return None


def _listed_ids(workspace: Workspace) -> dict[str, int]:
    """The ids of the configured groups' projects by path, as their last listing gave them: a
    project's sync reads what its listings start from with its begin when its id is known
    (sync/engine.py). A record that cannot be read only costs that transaction."""
    try:
        return {m.path: m.project_id for m in record_store.members(workspace.config)}
    except StoreError:
        return {}

