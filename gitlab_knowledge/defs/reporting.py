"""Where a step reports progress: the CLI installs a terminal progress bar for the in-process
run it starts; a run launched by Dagster logs progress to its event log instead."""

import contextlib
from collections.abc import Iterator

import dagster as dg

from gitlab_knowledge.sync.progress import LogProgress, SyncProgress

_installed: SyncProgress | None = None


@contextlib.contextmanager
def installed(progress: SyncProgress) -> Iterator[None]:
    global _installed
    previous, _installed = _installed, progress
    try:
        yield
    finally:
        _installed = previous


def progress_for(context: dg.AssetExecutionContext) -> SyncProgress:
    return _installed or LogProgress(context.log)
