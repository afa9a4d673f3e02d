"""sync_runs: the audit trail, and single-flight per project.

A second sync of a project refuses to start while the first is alive. A run whose process is gone
(same host, PID no longer running: a kill -9 or a crash) is marked `abandoned` and taken over
automatically, since resuming from the cursor is always safe. A run on another host, or one whose
process cannot be checked, is only taken over with `--force` once its heartbeat is stale.

`pipeline_lock` is the same rule one level up, for whole runs of the Dagster jobs: one process
per data directory runs them at a time, and a second one is refused at once instead of queueing
behind the first in a Dagster pool.
"""

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import psutil

from gitlab_knowledge.errors import SyncInProgressError
from gitlab_knowledge.redact import redact
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.timeutil import utcnow

HOSTNAME = socket.gethostname()
# Clock ticks per second of /proc's start times, to read tokens stored in that unit.
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Start times are 0.01 s apart on Linux; the slack absorbs platforms whose boot time drifts a little,
# and no PID is reused within a second of its previous owner starting.
_SAME_START_S = 1.0
LOCK_FILE = ".pipeline.lock"
_held: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth): re-entrant within a process
_held_guard = threading.Lock()
_OWN_START: dict[int, str | None] = {}  # pid -> its start (`_own_start`)


@contextlib.contextmanager
def pipeline_lock(data_dir: Path, what: str = "a sync") -> Iterator[None]:
    """Hold the data directory's pipeline lock, or raise `SyncInProgressError` at once.

    An flock, so the kernel lets go of it when its process dies, kill -9 included: there is no
    stale lock to take over. Re-entrant within one process. A directory this process cannot write
    is not locked: nothing can be written there, and the writers say so themselves."""
    path = data_dir / LOCK_FILE
    key = str(path)
    with _held_guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
            acquired = None
        else:
            acquired = _acquire(data_dir, path, what)
            if acquired is not None:
                _held[key] = (acquired, 1)
    try:
        yield
    finally:
        with _held_guard:
            if key in _held:
                fd, depth = _held[key]
                if depth > 1:
                    _held[key] = (fd, depth - 1)
                else:
                    del _held[key]
                    os.close(fd)  # closing the descriptor releases the flock


def _acquire(data_dir: Path, path: Path, what: str) -> int | None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            return None
        who = f" (PID {holder})" if holder.isdigit() else ""
        raise SyncInProgressError(f"{what} refused: another process{who} is running a sync or embed on "
                                  f"{data_dir}; try again when it finishes") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def process_start(pid: int) -> str | None:
    """When `pid` started, in seconds since boot (guards against PID reuse), or None if unknown.

    Seconds since boot rather than psutil's wall-clock `create_time()` alone: the wall clock moves
    when NTP steps it, and a live run must not look like a different process afterwards."""
    try:
        return _since_boot(psutil.Process(pid))
    except psutil.Error:
        return None


def _own_start() -> str | None:
    """This process's `process_start`, read once per process (a batch begins hundreds of runs;
    a forked child has a pid, and so an entry, of its own)."""
    pid = os.getpid()
    if pid not in _OWN_START:
        _OWN_START[pid] = process_start(pid)
    return _OWN_START[pid]


def _since_boot(proc: psutil.Process) -> str:
    return f"{proc.create_time() - psutil.boot_time():.2f}"


def _start_seconds(token: str) -> float | None:
    # Tokens stored before psutil were the raw clock-tick count of /proc/<pid>/stat (digits only).
    try:
        return float(token) if "." in token else int(token) / _CLOCK_TICKS
    except ValueError:
        return None


def process_alive(pid: int | None, start_token: str | None = None) -> bool | None:
    """True/False when we can tell, None when we cannot (no PID recorded)."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # a zombie has finished running
            return False
        started = _since_boot(proc)
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:  # it exists; whose it is cannot be checked
        return True
    recorded = _start_seconds(start_token) if start_token else None
    if recorded is None:
        return True
    # A different start time means the PID now belongs to another process.
    return abs(float(started) - recorded) <= _SAME_START_S


def begin_run(con: duckdb.DuckDBPyConnection, project_path: str, mode: str, *, force: bool,
              stale_after: timedelta, dagster_run_id: str | None) -> int:
    """Register a running sync, or raise `SyncInProgressError` (call inside a transaction)."""
    now = utcnow()
    values = [project_path, mode, now, now, os.getpid(), HOSTNAME, dagster_run_id,
              json.dumps({"process_start": _own_start()})]
    # The usual case, no run of the path marked running: the check and the insert in one
    # statement (a batch begins hundreds of these, each a statement fewer on its commit threads).
    begun = con.execute(f"""
        {_INSERT_RUN} SELECT nextval('sync_run_ids'), ?, ?, 'running', ?, ?, ?, ?, ?, ?
        WHERE NOT EXISTS (SELECT 1 FROM sync_runs WHERE project_path = ? AND status = 'running')
        RETURNING id
    """, [*values, project_path]).fetchone()
    if begun is not None:
        return int(begun[0])
    rows = con.execute("""
        SELECT id, pid, hostname, heartbeat_at, started_at, stats FROM sync_runs
        WHERE project_path = ? AND status = 'running' ORDER BY id
    """, [project_path]).fetchall()
    for run_id, pid, host, heartbeat, started, stats in rows:
        token = (json.loads(stats) if stats else {}).get("process_start")
        alive = process_alive(pid, token) if host == HOSTNAME else None
        last = heartbeat or started
        stale = now - last > stale_after
        if alive is False:
            _close(con, run_id, "abandoned", f"process {pid} ended without finishing (killed or crashed); "
                   "a later run resumed from the cursor")
            continue
        if alive is None and stale and force:
            _close(con, run_id, "abandoned", "taken over with --force after its heartbeat went stale")
            continue
        ago = int((now - last).total_seconds())
        where = f"PID {pid} on {host}" if pid else "unknown process"
        hint = ("it looks stale: run again with --force to take over" if stale and alive is None
                else "wait for it to finish")
        raise SyncInProgressError(
            f"a sync of {project_path} is already running (sync run {run_id}, {where}, "
            f"last heartbeat {ago}s ago); {hint}")
    run_id = one_row(con.execute(f"""
        {_INSERT_RUN} VALUES (nextval('sync_run_ids'), ?, ?, 'running', ?, ?, ?, ?, ?, ?)
        RETURNING id
    """, values))[0]
    return int(run_id)


_INSERT_RUN = ("INSERT INTO sync_runs (id, project_path, mode, status, started_at, heartbeat_at, pid, hostname, "
               "dagster_run_id, stats)")


def heartbeat(con: duckdb.DuckDBPyConnection, run_id: int, project_id: int | None = None) -> None:
    con.execute("UPDATE sync_runs SET heartbeat_at = ?, project_id = COALESCE(?, project_id) WHERE id = ?",
                [utcnow(), project_id, run_id])


def _close(con: duckdb.DuckDBPyConnection, run_id: int, status: str, error: str | None,
           stats: dict[str, Any] | None = None, project_id: int | None = None) -> None:
    con.execute("""
        UPDATE sync_runs SET status = ?, finished_at = ?, error = ?, stats = COALESCE(?, stats),
            project_id = COALESCE(?, project_id)
        WHERE id = ?
    """, [status, utcnow(), redact(error) if error else None, json.dumps(stats) if stats is not None else None,
          project_id, run_id])


def finish_run(con: duckdb.DuckDBPyConnection, run_id: int, stats: dict[str, Any],
               project_id: int | None = None) -> None:
    """The run succeeded; `project_id`: whose run it was, if no heartbeat recorded it yet."""
    _close(con, run_id, "succeeded", None, stats, project_id)


def fail_run(con: duckdb.DuckDBPyConnection, run_id: int, error: str, stats: dict[str, Any],
             project_id: int | None = None) -> None:
    _close(con, run_id, "failed", error, stats, project_id)
