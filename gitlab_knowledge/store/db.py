"""Opening the DuckDB file: short-lived connections, bounded waits, the schema brought up to date.

DuckDB allows one writing process per file, and while it writes nobody else can open it, not even
read-only. So every connection here is short-lived and closed on exit, writers are serialized by
Dagster pools, and a connection that meets the lock waits a bounded time, then raises a
`StoreBusyError` that says who holds it instead of hanging (DuckDBResource retries for ~100 s).

The first connection of a process to a store brings its schema up to date (store/migrations.py):
a write open applies the pending migrations itself; a read open that meets an older store
migrates it through a brief write open, then reads, so a reader never sees a half-old schema.
"""

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from gitlab_knowledge.errors import StoreBusyError, StoreError
from gitlab_knowledge.store import knocking, migrations
from gitlab_knowledge.store.lingering import release_lingering

_LOCK_PATTERN = re.compile(r"Could not set lock on file|Conflicting lock is held", re.IGNORECASE)
_READ_ONLY_PATTERN = re.compile(r"Permission denied|Read-only file system", re.IGNORECASE)
_PID_PATTERN = re.compile(r"PID (\d+)")
_schema_ready: set[str] = set()
_schema_lock = threading.Lock()
_held: dict[str, duckdb.DuckDBPyConnection] = {}  # resolved path -> the connection `holding_open` keeps
_holders: dict[str, int] = {}  # resolved path -> how many `holding_open` (and `kept_open`) want it held
_closers: dict[str, contextlib.ExitStack] = {}
_gaps: set[str] = set()  # resolved paths `kept_open` is giving to other processes for a moment
# Set by `one_writer`: the turn (every connection of this process taken one at a time) and a
# condition on it, signalled when a hold ends or a gap closes.
_writer: list[Any] = []
# `kept_open`: held at most this long before a gap (plus the pass in progress), and the gap. A
# reader of another process retries every <= 0.25 s, so a gap of 0.5 s takes one attempt in.
KEEP_S = 2.0
GAP_S = 0.5
# A gap at least this often even when no process has knocked (store/knocking.py): one that cannot write the
# knock file (a read-only data directory, a raw DuckDB client) still gets in within this long.
UNASKED_GAP_S = 15.0


def one_row(cursor: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The row of a query that always returns one (an aggregate, `nextval`): DuckDB types
    `fetchone()` as optional."""
    row = cursor.fetchone()
    if row is None:
        raise AssertionError("a one-row query returned no row")
    return row


def _is_lock_error(exc: Exception) -> bool:
    return bool(_LOCK_PATTERN.search(str(exc)))


T = TypeVar("T")


def waiting_out_writers(path: Path, wait: float, attempt: Callable[[], T]) -> T:
    """`attempt()` (an open or an ATTACH of the store at `path`), retried while another process
    holds the file's lock, for up to `wait` seconds. Running out of time, or any other failure, is
    one line saying what to do."""
    deadline = time.monotonic() + wait
    delay = 0.02
    while True:
        try:
            return attempt()
        except duckdb.Error as exc:
            if not _is_lock_error(exc):
                raise StoreError(f"cannot open the store {path}: {str(exc).splitlines()[0]}") from None
            if time.monotonic() >= deadline:
                holder = _PID_PATTERN.search(str(exc))
                who = f" (held by PID {holder.group(1)})" if holder else ""
                raise StoreBusyError(
                    f"the store {path.name} is busy: another process is writing it{who}, "
                    f"most likely a sync; waited {wait:.0f}s, try again when it finishes") from None
        knocking.knock(path)
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


def _open(path: Path, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    release_lingering(path)  # a reader of this process keeping the file attached lets it go first
    return waiting_out_writers(path, wait, lambda: duckdb.connect(str(path), read_only=read_only))


@contextlib.contextmanager
def holding_open(path: Path, wait: float = 120.0) -> Iterator[None]:
    """Keep the store open in this process while many short opens follow (a batch carrying many
    projects through the DuckDB layers): each `write_connection` and `read_connection` of it is
    then a cursor of this one connection. Closing a file's last connection checkpoints it: ten
    open-write-close cycles on a small store took 1.47 s against 0.10 s with a connection held (a
    loaded machine), and one project's layers open it about a dozen times. No other process can
    open the file meanwhile, so the holder keeps it for pure store work only, never across a wait
    for GitLab (`kept_open` is the exception, with gaps). Holds nest (the connection closes with
    the last). Under `one_writer` the open and the close take their turn like any connection (a
    fetch's commit on another thread may be using a cursor of it), not the whole span, and a new
    hold waits out a gap `kept_open` is giving to other processes."""
    key = str(path.resolve())
    with _turn():
        _hold(path, key, wait)
    try:
        yield
    finally:
        with _turn():
            _unhold(key)


def _hold(path: Path, key: str, wait: float) -> None:
    """One more holder of the store (the caller has the turn)."""
    while key in _gaps:  # under one_writer only: `kept_open` is giving the file to other processes
        _writer[1].wait()
    if key not in _held:
        opened = contextlib.ExitStack()
        _held[key] = opened.enter_context(_write_connection(path, wait))
        _closers[key] = opened
    _holders[key] = _holders.get(key, 0) + 1


def _unhold(key: str) -> None:
    """One holder fewer; the last closes the connection (the caller has the turn)."""
    _holders[key] -= 1
    if _holders[key] == 0:
        del _held[key], _holders[key]
        _closers.pop(key).close()
    if len(_writer) > 1:
        _writer[1].notify_all()


@contextlib.contextmanager
def kept_open(path: Path, hold_s: float | None = None, gap_s: float | None = None) -> Iterator[None]:
    """The store held open in this process for a long span of store work between waits for
    GitLab (a batch's fetch phase: its projects' commits and store-layer passes, several a
    second), and given up to other processes at bounded intervals: every `hold_s` that follows
    a knock (store/knocking.py: each retry of a process waiting for the file says so), and at least every
    `UNASKED_GAP_S`, the hold is released once no pass is inside it, and for `gap_s` no
    connection of this process touches the file. A reader of another process retries every
    <= 0.25 s (`waiting_out_writers`), so one attempt falls inside the gap: its wait is at most
    `hold_s`, plus the pass in progress, plus `gap_s`. Without the hold, each commit of a fetch thread that came while no pass held
    the store opened it (loading its catalog, ~10-20 ms) and checkpointed it on close."""
    key = str(path.resolve())
    hold_s, gap_s = KEEP_S if hold_s is None else hold_s, GAP_S if gap_s is None else gap_s
    with one_writer():
        with _writer[1]:  # the first hold before anything else connects: no open of the file is left to luck
            held = _try_hold(path, key)
        stop = threading.Event()
        keeper = threading.Thread(target=_keep, args=(path, key, held, hold_s, gap_s, stop), name="store-keeper",
                                  daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()


def _try_hold(path: Path, key: str) -> bool | None:
    """A hold of the store if the file is free now: False while another process has it (this
    round goes without), None if it cannot be opened at all (each connection will say why)."""
    try:
        _hold(path, key, wait=0.0)
    except StoreBusyError:
        return False
    except StoreError:
        return None
    return True


def _keep(path: Path, key: str, held: bool | None, hold_s: float, gap_s: float, stop: threading.Event) -> None:
    changed = _writer[1]
    last_gap, last_gap_at = time.time(), time.monotonic()
    while held is not None:
        stop.wait(hold_s)
        # Nobody knocked since the last gap: keep the hold. Each gap closed the file (a
        # checkpoint) and stopped the batch's commits for `gap_s`: ~2.5 s in every ~20 s of a
        # 300-project fetch phase, with nobody waiting.
        if (held and not stop.is_set() and not knocking.knocked_since(path, last_gap)
                and time.monotonic() - last_gap_at < UNASKED_GAP_S):
            continue
        last_gap, last_gap_at = time.time(), time.monotonic()
        with changed:
            try:
                if held:
                    _gaps.add(key)  # no new hold meanwhile: the pass in progress ends, then the gap
                    while _holders[key] > 1:
                        changed.wait()
                    _unhold(key)
                if not stop.is_set():
                    stop.wait(gap_s)  # with the turn: no connection of this process opens the file
            finally:  # a close that failed too: no hold waits for a gap that will not end
                _gaps.discard(key)
                changed.notify_all()
            if stop.is_set():
                return
            held = _try_hold(path, key)


@contextlib.contextmanager
def one_writer() -> Iterator[None]:
    """While inside, this process's connections to a store are taken one at a time, across
    threads: a batch fetches several projects at once (sync/many.py), and their commits, on the
    fetch threads, and the store layers of the projects already fetched, on the batch's own
    thread, must not write at the same time (DuckDB would let transactions of one process race,
    and a held connection must not be closed under a cursor in use). A connection is short, so a
    turn is a commit's length, not a project's."""
    if _writer:
        yield
        return
    turn = threading.RLock()
    _writer.extend([turn, threading.Condition(turn)])
    try:
        yield
    finally:
        _writer.clear()


def _turn() -> contextlib.AbstractContextManager[Any]:
    return _writer[0] if _writer else contextlib.nullcontext()


def _cursor_of_held(path: Path) -> duckdb.DuckDBPyConnection | None:
    held = _held.get(str(path.resolve())) if _held else None
    return held.cursor() if held is not None else None


@contextlib.contextmanager
def write_connection(path: Path, wait: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection, schema ensured, closed on exit (releasing the file lock)."""
    with _turn():
        held = _cursor_of_held(path)
        if held is not None:
            try:
                yield held
            except BaseException:
                _rollback_quietly(held)
                raise
            finally:
                held.close()
            return
        with _write_connection(path, wait) as con:
            yield con


@contextlib.contextmanager
def _write_connection(path: Path, wait: float) -> Iterator[duckdb.DuckDBPyConnection]:
    try:
        # Owner-only: the store holds confidential issues and internal notes.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the data directory {path.parent}: {exc.strerror}") from None
    con = _open(path, read_only=False, wait=wait)
    try:
        _ensure_schema(con, path)
        yield con
    except duckdb.Error as exc:
        _rollback_quietly(con)
        message = str(exc).splitlines()[0]
        if "No space left" in message or "Read-only file system" in message or "Permission denied" in message:
            raise StoreError(f"cannot write the store {path}: {message}") from None
        raise
    except BaseException:
        _rollback_quietly(con)
        raise
    finally:
        con.close()


@contextlib.contextmanager
def read_connection(path: Path, wait: float = 10.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection; a missing store is a clear error, not an empty database. A store
    with an older schema is migrated first (a brief write open), as a write command would."""
    if not path.exists():
        raise StoreError(f"no data yet at {path}: run `python -m gitlab_knowledge sync` first")
    with _turn():
        held = _cursor_of_held(path)
        if held is not None:  # this process holds the store open (`holding_open`): read through it
            try:
                yield held
            finally:
                held.close()
            return
    con = _open(path, read_only=True, wait=wait)
    try:
        version = _pending_version(con, path)
        if version is not None:
            con.close()
            _migrate_for_reading(path, wait, version)
            con = _open(path, read_only=True, wait=wait)
        yield con
    finally:
        con.close()


def _pending_version(con: duckdb.DuckDBPyConnection, path: Path) -> int | None:
    """The store's version if it needs migrating, None if it is current (remembered per process)."""
    key = str(path.resolve())
    if key in _schema_ready:
        return None
    version = migrations.current_version(con)
    migrations.refuse_newer(version)
    if version < migrations.latest_version():
        return version
    _schema_ready.add(key)
    return None


def _migrate_for_reading(path: Path, wait: float, version: int) -> None:
    read_only = StoreError(
        f"the store {path} has schema {version}, this gitlab_knowledge needs {migrations.latest_version()}, "
        "and it is read-only here: a write command (`python -m gitlab_knowledge sync`) upgrades it")
    # As root os.access says yes to anything, so the failed open below is checked as well.
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        raise read_only
    try:
        with write_connection(path, wait=wait):
            pass
    except StoreError as exc:
        if _READ_ONLY_PATTERN.search(exc.message):
            raise read_only from None
        raise


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        _rollback_quietly(con)
        raise
    con.execute("COMMIT")


def _rollback_quietly(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")


def _ensure_schema(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    key = str(path.resolve())
    if key in _schema_ready:
        return
    with _schema_lock:
        if key in _schema_ready:
            return
        try:
            applied = migrations.migrate(con)
        except BaseException:
            _forget_table_schemas()  # some migrations may have committed before the failure
            raise
        if applied:
            _forget_table_schemas()
        _schema_ready.add(key)


def _forget_table_schemas() -> None:
    # Imported here: bulk pulls in pyarrow, which read-only commands never need.
    from gitlab_knowledge.store import bulk

    bulk.forget_table_schemas()


def forget_schema_cache() -> None:
    """Tests that delete a store file and recreate it at the same path call this."""
    _schema_ready.clear()
    _forget_table_schemas()
