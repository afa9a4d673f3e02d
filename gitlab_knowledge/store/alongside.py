"""Statements run beside a read: a second connection to the database a read's connection reads
(the same catalog and search path, so the same lens), used on another thread while the first runs
its own. DuckDB runs each connection's statement at once, on the cores a single small statement
leaves idle: `me`, `person` and `history` read their independent parts this way
(graph/people.py, graph/person.py, graph/history.py), and so do the MCP item tools (mcp/items.py)."""

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

import duckdb

from gitlab_knowledge.store.db import one_row

T = TypeVar("T")


# The catalog and search path of the connections store/reader.py hands out, by the connection's
# id while its read lasts: asking DuckDB for them was a statement of its own (~0.4 ms of the
# ~1 ms `alongside` costs a call).
_settings: dict[int, tuple[str, str]] = {}


@contextlib.contextmanager
def settings_known(con: duckdb.DuckDBPyConnection, catalog: str, path: str) -> Iterator[None]:
    """While this lasts, `alongside(con)` takes `con`'s catalog and search path (`path`: "" for
    DuckDB's default) as said here instead of asking."""
    _settings[id(con)] = (catalog, path)
    try:
        yield
    finally:
        _settings.pop(id(con), None)


@contextlib.contextmanager
def alongside(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Another connection to the database `con` reads, seeing the same tables (its catalog and
    search path: through the same lens, store/reader.py), for statements run on another thread
    while `con` runs its own: DuckDB runs each connection's statement at once, on the cores a
    single small statement leaves idle. Closed at the end; use it only within the read that gave
    `con` (which holds the store attached and its lock)."""
    known = _settings.get(id(con))
    catalog, path = known if known is not None else \
        one_row(con.execute("SELECT current_database(), current_setting('search_path')"))
    other = con.cursor()
    try:
        other.execute('USE "' + catalog.replace('"', '""') + '"')
        if path:
            other.execute("SET search_path = '" + path.replace("'", "''") + "'")
        yield other
    finally:
        other.close()


# The threads statements `alongside` a read run on: kept for the process (starting one on every
# call cost ~2 ms of a call on a loaded machine), made again in a forked child (whose copy has no
# threads). Reads of more threads than these queue their work alongside.
_beside: tuple[int, ThreadPoolExecutor] | None = None
_beside_made = threading.Lock()


@contextlib.contextmanager
def read_alongside(con: duckdb.DuckDBPyConnection,
                   work: Callable[[duckdb.DuckDBPyConnection], T]) -> Iterator[Future[T]]:
    """`work` run on a kept thread with a connection `alongside` `con`, while the caller reads on
    `con`; it has ended before that connection closes (a statement is never left under a closed
    cursor), however the caller's part ends."""
    global _beside
    with _beside_made:
        if _beside is None or _beside[0] != os.getpid():
            _beside = (os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="store-alongside"))
        pool = _beside[1]
    with alongside(con) as other:
        future = pool.submit(work, other)
        try:
            yield future
        finally:
            wait([future])
