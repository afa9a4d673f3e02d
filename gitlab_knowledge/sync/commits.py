"""A project's sync's writes to the raw layer: each a transaction, or, while the project is small,
queued for the transaction that records how the sync ended.

Every transaction of a store not held open is an open of the file and a checkpoint at its close
(~20-40 ms of CPU each on a loaded machine), and a small project's sync had a dozen of them: its
begin, the project row, each listing's state, each page, the wiki, the releases, the look-ups,
its finish. In a batch of hundreds of projects those opens were most of the fetch's CPU, on the
threads the store layers of the projects already fetched compete with. So the work of a sync is
queued (each write with the provenance it was fetched under) while what is queued is less than a
page of parents (`limit`, `gitlab.per_page`), and `settle` applies it in order in the transaction
of the sync's end (`sync_runs`' finish, or its failure: the pages fetched before a failure are
kept, as their own commits kept them). Once a page's worth is queued the queue commits with that
write and every later write commits on its own, as before: a big project commits page by page
(cursor and all), so a kill loses at most a page of work, which the next sync fetches again from
the cursor. A small project's kill loses its fetch (a dozen calls), never a half-written page.
"""

import threading
from collections.abc import Callable
from typing import Any

import duckdb

from gitlab_knowledge.store import raw
from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.workspace import Workspace

Work = Callable[..., Any]  # work(con, provenance) -> anything


class Commits:
    """The writes of one project's sync, in the order they were made."""

    def __init__(self, workspace: Workspace, provenance: Callable[[], raw.Provenance],
                 heartbeat: Callable[[duckdb.DuckDBPyConnection], None], limit: int) -> None:
        self.workspace = workspace
        self._provenance = provenance
        self._heartbeat = heartbeat
        self.limit = max(1, limit)
        self._queued: list[tuple[Work, raw.Provenance]] = []
        self._weight = 0
        self.deferring = True
        self._lock = threading.Lock()  # page commits run on worker threads, the rest on the loop's
        self.transactions = 0  # how many this sync opened (tests count them)

    def now(self, work: Work) -> Any:
        """`work(con, provenance)` committed before this returns, after what is queued, in one
        transaction; its result."""
        with self._lock:
            queued, self._queued, self._weight = self._queued, [], 0
            try:
                with self.workspace.write() as con, transaction(con):
                    self.transactions += 1
                    for earlier, prov in queued:
                        earlier(con, prov)
                    out = work(con, self._provenance())
                    self._heartbeat(con)
                    return out
            except BaseException:
                self._queued[:0] = queued  # not written: the end of the sync records them or says why not
                raise

    def later(self, work: Work, weight: int = 0) -> None:
        """`work` queued while the sync is small (`weight`: the parents it writes), else `now`."""
        with self._lock:
            if self.deferring and self._weight + weight < self.limit:
                self._queued.append((work, self._provenance()))
                self._weight += weight
                return
            self.deferring = False
        self.now(work)

    def settle(self, con: duckdb.DuckDBPyConnection) -> None:
        """Apply what is queued, in order, in the caller's transaction (the sync's end)."""
        with self._lock:
            for work, prov in self._queued:
                work(con, prov)
            self._queued, self._weight = [], 0

    def drop(self) -> None:
        """Forget what is queued (its transaction failed and was rolled back)."""
        with self._lock:
            self._queued, self._weight = [], 0

    @property
    def pending(self) -> int:
        return len(self._queued)
