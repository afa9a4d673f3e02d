"""How a long-lived process (the MCP server) reads DuckDB: one resident DuckDB instance, the store
attached for each read.

Opening a DuckDB file costs ~9 ms, and nearly all of it is creating the database instance: an
empty in-memory database costs the same. So the server keeps one in-memory instance for its
lifetime and, for a read, ATTACHes the store READ_ONLY (~1 ms) and DETACHes it afterwards,
which closes the file and releases its lock. The detach waits `linger` (LINGER_S) after the last
read, on a thread of its own, off the answer's path: a read that comes meanwhile (the calls of a
burst: an agent's parallel calls, a benchmark) finds the store attached and skips the attach, the
detach and the reloading of the blocks it reads (~6 ms of CPU a call at 100K documents). An idle
server holds nothing: a sync in another process meets the lock for at most `linger`, and retries
(every <= 0.25 s); while a sync writes, a read waits the same bounded time and says "busy" in the
same words as `store.db.read_connection`. Every read sees the file as it is now: while attached
no other process can write it, a connection this process opens to it (store/db.py `_open`) first
detaches a lingering attachment, and the files' stamp is checked before an attachment is reused.

Reads may overlap (the tools run on worker threads): the first attaches, the last detaches, and
each gets its own cursor. A read may look through a `Lens` (store/visibility.py): views in a schema
of the resident instance that shadow store tables by name, over tables derived from the store (or
such tables themselves: copies of a store table's visible rows). Those tables are rebuilt only
when the store's files changed since (their stamp), which can only happen while nothing is
attached, since no sync writes while a read holds the file, or when the reader's overlay
(store/overlay.py: issues a shared server learnt are confidential since the sync) changed: the
reader writes it as tables of the resident instance the lenses read.
"""

import atexit
import contextlib
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from gitlab_knowledge.errors import StoreError
from gitlab_knowledge.store.alongside import settings_known
from gitlab_knowledge.store.db import read_connection, waiting_out_writers
from gitlab_knowledge.store.lingering import lingering, release_lingering
from gitlab_knowledge.store.overlay import ConfidentialOverlay

ALIAS = "gk_store"
# Lenses whose tables a reader keeps (one per viewer of a shared server, and the config's): the
# least recently used one not in use is dropped beyond this.
MAX_LENSES = 32
# Small answers a reader keeps per version of the store (`remembered`): beyond this, it starts over.
MAX_REMEMBERED = 1024
# How long the store stays attached after the last read (see the module's docstring): long
# enough for the calls of a burst, short beside the 0.25 s between a writer's retries and the
# 0.5 s gap a batch gives other processes (store/db.py `kept_open`).
LINGER_S = 0.1
T = TypeVar("T")
# A lens's step: a statement, or a function running statements on the resident instance (with the
# store attached) when what to create depends on the store (its tables).
LensStep = str | Callable[[duckdb.DuckDBPyConnection], None]


def store_stamp(path: Path) -> Any:
    """What changes whenever DuckDB writes the store: the file's and its WAL's mtime, size, inode."""
    stamp: list[tuple[int, int, int] | None] = []
    for file in (path, path.with_name(path.name + ".wal")):
        try:
            st = file.stat()
        except FileNotFoundError:
            stamp.append(None)
            continue
        stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(stamp)


@dataclass(frozen=True)
class Lens:
    """Views named like store tables, in `schema` of the resident instance (`memory.<schema>`),
    put first on a read's search path. `statements` create the schema's tables and views; they
    run again whenever the store changed since they last ran."""

    schema: str
    statements: tuple[LensStep, ...]
    # A viewer's lens (store/viewer_lens.py): whole projects are out of sight, and nothing says
    # what it hid (no "left out" counts, no "confidential" refusals: GitLab answers 404).
    viewer: bool = False


class StoreReader:
    """Read-only access to one store file for the life of a server process."""

    def __init__(self, path: Path, overlay: ConfidentialOverlay | None = None, linger: float = LINGER_S) -> None:
        self.path = path
        self.overlay = overlay
        self.linger = linger  # 0: detach as the last read ends
        self._attached = False
        self._idle_since = 0.0  # when the last read ended (monotonic)
        self._overlay_written = -1  # the overlay generation the instance's tables hold
        self._guard = threading.Lock()  # attach, detach, lenses and cursors: one thread at a time
        self._instance: duckdb.DuckDBPyConnection | None = None
        self._readers = 0
        self._stamp: Any = None  # the store's files as the current attachment found them
        self._lenses: OrderedDict[str, Any] = OrderedDict()  # schema → the stamp its tables were built from
        self._in_use: Counter[str] = Counter()  # schema → reads looking through it now
        self._schema_checked = False
        # (lens schema, key) → (the store's and overlay's version it was computed on, the answer)
        self._remembered: dict[tuple[str | None, Hashable], tuple[Any, Any]] = {}

    @contextlib.contextmanager
    def read(self, wait: float, lens: Lens | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection to the store, as `read_connection` gives one (through `lens`)."""
        if not self._schema_checked:
            # The first read goes through read_connection: it reports a missing store, migrates an
            # older one (a brief write open) and refuses a newer one, as every command does.
            with read_connection(self.path, wait):
                pass
            self._schema_checked = True
        elif not self.path.exists():
            raise StoreError(f"no data yet at {self.path}: run `python -m gitlab_knowledge sync` first")
        # Another reader of this process lingering on the file: DuckDB refuses a second attach of it.
        release_lingering(self.path, but=self)
        cursor = self._enter(wait, lens)
        try:
            cursor.execute(f"USE {ALIAS}")
            # As DuckDB then says them: USE sets the search path too, and the catalog is the
            # search path's first one.
            catalog, path = ALIAS, f"{ALIAS}.main"
            if lens is not None:
                catalog, path = "memory", f"memory.{lens.schema},{ALIAS}.main"
                cursor.execute(f"SET search_path = '{path}'")
            with settings_known(cursor, catalog, path):
                yield cursor
        finally:
            cursor.close()
            self._leave(lens)

    def remembered(self, lens: Lens | None, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`'s answer, computed once per version of the store (and of the overlay) for
        reads through `lens`; call it within a read of this reader (the version is the attached
        store's). For a small answer that every call asks again and that costs a query through the
        lens's views: a project path's id reads the lens's `raw_payloads` (~5 ms at 100K documents).
        An exception is not remembered."""
        with self._guard:
            version = (self._stamp, self._overlay_written)
            kept = self._remembered.get((lens.schema if lens else None, key))
        if kept is not None and kept[0] == version:
            return kept[1]  # type: ignore[no-any-return]
        value = compute()
        with self._guard:
            if len(self._remembered) >= MAX_REMEMBERED:
                self._remembered.clear()
            self._remembered[(lens.schema if lens else None, key)] = (version, value)
        return value

    def close(self) -> None:
        with self._guard:
            instance, self._instance = self._instance, None
            self._attached = False
            self._readers = 0
            self._lenses.clear()
            self._in_use.clear()
        if instance is not None:
            instance.close()

    def _enter(self, wait: float, lens: Lens | None) -> duckdb.DuckDBPyConnection:
        with self._guard:
            if self._instance is None:
                # One thread per query: a tool's reads are a few ms each, where handing pipelines
                # to DuckDB's worker threads costs more than it saves (~10% of the CPU of
                # file_history, get_merge_request and related at 100K documents, and on a busy
                # machine waits for a worker to be scheduled); calls on several threads of the
                # server still run side by side, each on its own.
                self._instance = duckdb.connect(":memory:", config={"threads": 1})
                self._lenses.clear()
                self._overlay_written = -1
            if self._readers == 0:
                if self._attached and store_stamp(self.path) != self._stamp:
                    self._detach()  # written since (a file replaced, or a lock not honoured): attach again
                if not self._attached:
                    self._attach(self._instance, wait)
                    self._attached = True
                    # Taken while attached: no writer can change the files until the detach.
                    self._stamp = store_stamp(self.path)
            self._readers += 1
            try:
                if lens is not None:
                    self._write_overlay(self._instance)
                    self._build(self._instance, lens)
                    self._in_use[lens.schema] += 1
                return self._instance.cursor()
            except BaseException:
                self._readers -= 1
                self._detach_if_unused()
                raise

    def _build(self, instance: duckdb.DuckDBPyConnection, lens: Lens) -> None:
        """The lens's tables as of the attached store (built again when the store changed)."""
        built = (self._stamp, self._overlay_written)
        if self._lenses.get(lens.schema) != built:
            self._lenses.pop(lens.schema, None)
            instance.execute(f"CREATE SCHEMA IF NOT EXISTS memory.{lens.schema}")
            for statement in lens.statements:
                if isinstance(statement, str):
                    instance.execute(statement)
                else:
                    statement(instance)
            self._lenses[lens.schema] = built
        self._lenses.move_to_end(lens.schema)
        idle = [s for s in self._lenses if self._in_use[s] == 0 and s != lens.schema]
        for schema in idle[:max(0, len(self._lenses) - MAX_LENSES)]:
            del self._lenses[schema]
            self._in_use.pop(schema, None)
            instance.execute(f"DROP SCHEMA IF EXISTS memory.{schema} CASCADE")

    def _write_overlay(self, instance: duckdb.DuckDBPyConnection) -> None:
        """The overlay's tables, written again when it changed (the lenses then rebuild on them)."""
        if self.overlay is None:
            return
        state = self.overlay.state()
        if state.generation != self._overlay_written:
            for statement in self.overlay.statements(state):
                instance.execute(statement)
            self._overlay_written = state.generation

    def _leave(self, lens: Lens | None) -> None:
        with self._guard:
            self._readers -= 1
            if lens is not None:
                self._in_use[lens.schema] -= 1
            if self._readers == 0 and self.linger > 0 and self._attached:
                self._idle_since = time.monotonic()
                _DETACHER.due(self, self._idle_since + self.linger)
                return
            self._detach_if_unused()

    def release_idle(self) -> None:
        """Detach the store now if no read is using it (a connection of this process is about to
        open the file, or the linger is over)."""
        with self._guard:
            self._detach_if_unused()

    def _detach_when_due(self) -> None:
        with self._guard:
            if self._readers == 0 and time.monotonic() >= self._idle_since + self.linger:
                self._detach_if_unused()

    def _detach_if_unused(self) -> None:
        if self._readers > 0 or self._instance is None:
            return
        self._detach()

    def _detach(self) -> None:
        if not self._attached or self._instance is None:
            return
        self._attached = False
        try:
            self._instance.execute(f"DETACH {ALIAS}")
        except duckdb.Error:
            # Never keep the file (and its lock) past the call: closing the instance drops it.
            self._instance.close()
            self._instance = None

    def _attach(self, instance: duckdb.DuckDBPyConnection, wait: float) -> None:
        quoted = "'" + str(self.path).replace("'", "''") + "'"
        waiting_out_writers(self.path, wait, lambda: instance.execute(f"ATTACH {quoted} AS {ALIAS} (READ_ONLY)"))
        if self.linger > 0:
            lingering(self.path, self)


class _Detacher:
    """One thread per process that detaches the readers' lingering attachments when their linger
    is over (a timer thread per read would cost a thread start on every answer). It holds the
    readers weakly: a reader dropped without `close` is not kept alive by it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[int, tuple[float, weakref.ref[StoreReader]]] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False

    def stop(self) -> None:
        """At exit, before the interpreter stops its threads: the attachments due are let go here,
        each after a detach in progress on the thread, so none is left for that thread to be cut
        off in the middle of (a DuckDB call torn down under a thread can abort the process)."""
        with self._changed:
            self._stopped = True
            readers = [ref() for _, ref in self._due.values()]
            self._due.clear()
        for reader in readers:
            if reader is not None:
                reader.release_idle()

    def due(self, reader: StoreReader, at: float) -> None:
        with self._changed:
            if self._stopped:
                reader._detach_if_unused()  # the process is exiting: no attachment outlives the call
                return
            self._due[id(reader)] = (at, weakref.ref(reader))
            if self._thread is None or not self._thread.is_alive():  # none yet, or a forked child's
                self._thread = threading.Thread(target=self._run, name="store-detacher", daemon=True)
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                ready = [key for key, (at, _) in self._due.items() if at <= now]
                readers = [self._due.pop(key)[1]() for key in ready]
                if not ready:
                    self._changed.wait(min((at for at, _ in self._due.values()), default=now + 60.0) - now)
                    continue
            for reader in readers:
                if reader is not None:
                    reader._detach_when_due()


_DETACHER = _Detacher()
atexit.register(_DETACHER.stop)
