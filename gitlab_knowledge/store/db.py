"""Opening the DuckDB file the way DESIGN.md requires.

DuckDB allows one writing process per file, and while it writes nobody else can open it, not even
read-only. So every connection here is short-lived and closed on exit, writers are serialized by
Dagster pools, and a connection that meets the lock waits a bounded time, then raises a
`StoreBusyError` that says who holds it instead of hanging (DuckDBResource retries for ~100 s).
"""

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from gitlab_knowledge.errors import StoreBusyError, StoreError

_LOCK_PATTERN = re.compile(r"Could not set lock on file|Conflicting lock is held", re.IGNORECASE)
_PID_PATTERN = re.compile(r"PID (\d+)")
_schema_ready: set[str] = set()
_schema_lock = threading.Lock()


def _is_lock_error(exc: Exception) -> bool:
    return bool(_LOCK_PATTERN.search(str(exc)))


def _open(path: Path, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + wait
    delay = 0.02
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreError(f"cannot open the store {path}: {str(exc).splitlines()[0]}") from None
            if time.monotonic() >= deadline:
                holder = _PID_PATTERN.search(str(exc))
                who = f" (held by PID {holder.group(1)})" if holder else ""
                raise StoreBusyError(
                    f"the store {path.name} is busy: another process is writing it{who}, "
                    f"most likely a sync; waited {wait:.0f}s, try again when it finishes") from None
        except duckdb.Error as exc:
            raise StoreError(f"cannot open the store {path}: {str(exc).splitlines()[0]}") from None
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


@contextlib.contextmanager
def write_connection(path: Path, wait: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection, schema ensured, closed on exit (releasing the file lock)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
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
    """A read-only connection; a missing store is a clear error, not an empty database."""
    if not path.exists():
        raise StoreError(f"no data yet at {path}: run `python -m gitlab_knowledge sync` first")
    con = _open(path, read_only=True, wait=wait)
    try:
        yield con
    finally:
        con.close()


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
    from gitlab_knowledge.store.schema import apply_schema

    with _schema_lock:
        apply_schema(con)
        _schema_ready.add(key)


def forget_schema_cache() -> None:
    """Tests that delete a store file and recreate it at the same path call this."""
    _schema_ready.clear()
