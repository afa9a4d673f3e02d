"""Canceling the runs a stopping `ui` would otherwise leave failed.

Stopping `dagster dev` ends its process group, run workers included; a worker that receives
SIGTERM records its run as a FAILURE, red in the UI as if the sync had gone wrong. So `ui` first
asks Dagster to terminate each run its daemon or webserver launched (a CLI sync runs in its own
process and is left alone), as the UI's "Terminate" button does: the run coordinator cancels a
queued run at once and has the code server interrupt a started one, which then ends CANCELED.
A run still not finished when the wait is over is marked canceled once the server is gone.

The request can fail to take effect: the code server does not answer in time, or the run's
process loses the interrupt (code that takes the signal's exception for a failure and carries
on: DuckDB raises its own RuntimeError in its place, which a batch's optional reads took for
"could not read" until `errors.is_interrupt` knew that form; a finalizer, where Python drops
any exception). A run of ours that records its process (a batch run, discovery) and is still
going `RESEND_S` after the request is then interrupted directly (SIGINT, as the code server
does), once; without that, it carried on and ended a success the stop had not waited for.
"""

import contextlib
import os
import signal
import time
from collections.abc import Callable

import dagster as dg

from gitlab_knowledge.defs.batch import BATCH_TAG
from gitlab_knowledge.defs.run_slots import HOST_TAG, PID_TAG, PROCESS_START_TAG, TRIGGER_TAG
from gitlab_knowledge.sync.runs import HOSTNAME, process_alive

IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
REASON = "the Dagster UI (`ui`) was stopped while this run was in progress"
RESEND_S = 15.0  # ample for a run to act on an interrupt that did arrive, even on a loaded machine


def server_runs(instance: dg.DagsterInstance) -> list[str]:
    """The ids of the runs in progress that the daemon or the webserver launched (not a CLI sync's,
    nor a project run a batch run started: it stops with its batch, recorded canceled)."""
    return [run.run_id for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS))
            if run.tags.get(TRIGGER_TAG) != "cli" and BATCH_TAG not in run.tags]


def cancel_runs(instance: dg.DagsterInstance, run_ids: list[str], *, wait_s: float = 30.0,
                sleep: Callable[[float], None] = time.sleep, resend_s: float = RESEND_S) -> None:
    """Ask Dagster to terminate `run_ids` and wait (up to `wait_s`) for them to end; those of
    them still going after `resend_s` are interrupted directly where their process is known."""
    for run_id in run_ids:
        # A coordinator or code server that cannot be reached leaves the run to the direct
        # interrupt below, or to `mark_canceled`.
        with contextlib.suppress(Exception):
            instance.run_coordinator.cancel_run(run_id)
    asked = time.monotonic()
    interrupted: set[str] = set()
    while run_ids and time.monotonic() < asked + wait_s and (going := _unfinished(instance, run_ids)):
        if time.monotonic() >= asked + resend_s:
            for run_id in set(going) - interrupted:
                interrupted.add(run_id)
                interrupt_process(instance, run_id)
        sleep(0.5)


def interrupt_process(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Send SIGINT to the process run `run_id` recorded as its own, if that process is on this
    host and still the one that recorded it (not a later process given the same PID). Whether
    the signal was sent."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.tags.get(HOST_TAG) != HOSTNAME:
        return False
    pid, start = run.tags.get(PID_TAG, ""), run.tags.get(PROCESS_START_TAG, "")
    # Without its start time, a PID could since be another process's: no signal on a guess.
    if not pid.isdigit() or not start or int(pid) == os.getpid() or process_alive(int(pid), start) is not True:
        return False
    try:
        os.kill(int(pid), signal.SIGINT)
    except OSError:  # ended meanwhile, or not ours to signal
        return False
    return True


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
