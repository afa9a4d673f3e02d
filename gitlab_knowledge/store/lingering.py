"""The readers of this process that may keep a store attached between reads (store/reader.py's
`linger`), so that anything of this process opening that store first makes them let it go: DuckDB
refuses to open a file another database of the same process has attached ("Unique file handle
conflict"), where another process would only wait for the lock (store/db.py `_open`)."""

import threading
import weakref
from pathlib import Path
from typing import Any, Protocol


class Lingering(Protocol):
    def release_idle(self) -> None: ...


# resolved path -> the readers that may keep it attached (held weakly: a reader dropped is gone)
_lingering: dict[str, weakref.WeakSet[Any]] = {}
_lingering_lock = threading.Lock()


def lingering(path: Path, holder: Lingering) -> None:
    """`holder` may keep the store at `path` attached while no read uses it."""
    with _lingering_lock:
        _lingering.setdefault(str(path.resolve()), weakref.WeakSet()).add(holder)


def release_lingering(path: Path, but: object = None) -> None:
    """Every reader of this process that keeps the store at `path` attached, idle, detaches it
    (but `but`): this process is about to open or attach the file."""
    if not _lingering:
        return
    with _lingering_lock:
        holders = [h for h in _lingering.get(str(path.resolve()), ()) if h is not but]
    for holder in holders:
        holder.release_idle()
