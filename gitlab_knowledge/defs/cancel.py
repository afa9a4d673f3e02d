"""Canceling the runs a stopping `ui` would otherwise leave failed.

Stopping `dagster dev` ends its process group, run workers included; a worker that receives
SIGTERM records its run as a FAILURE, red in the UI as if the sync had gone wrong. So `ui` first
asks Dagster to terminate each run its daemon or webserver launched (a CLI sync runs in its own
process and is left alone), as the UI's "Terminate" button does: the run coordinator cancels a
queued run at once and has the code server interrupt a started one, which then ends CANCELED.
A run still not finished when the wait is over is marked canceled once the server is gone.
"""

import contextlib
import time
from collections.abc import Callable

import dagster as dg

from gitlab_knowledge.defs.batch import BATCH_TAG
from gitlab_knowledge.defs.run_slots import TRIGGER_TAG

IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
REASON = "the Dagster UI (`ui`) was stopped while this run was in progress"


def server_runs(instance: dg.DagsterInstance) -> list[str]:
    """The ids of the runs in progress that the daemon or the webserver launched (not a CLI sync's,
    nor a project run a batch run started: it stops with its batch, recorded canceled)."""
    return [run.run_id for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS))
            if run.tags.get(TRIGGER_TAG) != "cli" and BATCH_TAG not in run.tags]


def cancel_runs(instance: dg.DagsterInstance, run_ids: list[str], *, wait_s: float = 30.0,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """Ask Dagster to terminate `run_ids` and wait (up to `wait_s`) for them to end."""
    for run_id in run_ids:
        # A coordinator or code server that cannot be reached leaves the run to `mark_canceled`.
        with contextlib.suppress(Exception):
            instance.run_coordinator.cancel_run(run_id)
    deadline = time.monotonic() + wait_s
    while run_ids and time.monotonic() < deadline and _unfinished(instance, run_ids):
        sleep(0.5)


def mark_canceled(instance: dg.DagsterInstance, run_ids: list[str]) -> list[str]:
    """Once the server's processes are gone: record as canceled those of `run_ids` that no process
    will finish (else the reaper would later record them as failed)."""
    marked = []
    # A batch's project run in progress when its process went: canceled with its batch.
    inner = [run.run_id for batch in run_ids
             for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS, tags={BATCH_TAG: batch}))]
    for run_id in _unfinished(instance, [*run_ids, *inner]):
        run = instance.get_run_by_id(run_id)
        if run is not None:
            instance.report_run_canceled(run, message=REASON)
            marked.append(run_id)
    return marked


def _unfinished(instance: dg.DagsterInstance, run_ids: list[str]) -> list[str]:
    out = []
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in IN_PROGRESS:
            out.append(run_id)
    return out
