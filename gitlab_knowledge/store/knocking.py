"""Knocking: how a process waiting for the store tells the batch keeping it open (store/db.py
`kept_open`) that someone waits, so that the batch gives a gap only then. The knock is the
modification time of an empty file beside the store; DuckDB's file lock says nothing about who
waits for it."""

import contextlib
import os
from pathlib import Path


def knock_path(path: Path) -> Path:
    """The file whose modification time says a process is waiting for the store at `path`."""
    return path.with_name(path.name + ".waiting")


def knock(path: Path) -> None:
    """Say that this process waits for the store (every retry of store/db.py `waiting_out_writers`): a batch
    keeping it open (`kept_open`) gives a gap at its next round. A directory this process may not
    write keeps its knock unsaid: the batch's unasked gaps still let it in (store/db.py `UNASKED_GAP_S`)."""
    target = knock_path(path)
    try:
        os.utime(target)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            target.touch(mode=0o600)
    except OSError:
        pass


def knocked_since(path: Path, when: float) -> bool:
    """Whether a process knocked at or after `when` (a `time.time()`)."""
    try:
        return knock_path(path).stat().st_mtime >= when
    except OSError:
        return False
