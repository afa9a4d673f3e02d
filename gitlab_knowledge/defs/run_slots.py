"""Which Dagster runs hold the store's pool slots, and freeing the slots of runs that died.

A run the CLI starts is tagged with its process (PID, host, start time), so that a later command or
the reaper sensor can tell a live run from one whose process was killed, and give back the pool
slots it held; a command refuses at once while a live run holds them.
"""

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg

from gitlab_knowledge.errors import SyncInProgressError
from gitlab_knowledge.sync.runs import HOSTNAME, process_alive

PROJECT_TAG = "gitlab_knowledge/project"
TRIGGER_TAG = "gitlab_knowledge/trigger"
PID_TAG = "gitlab_knowledge/pid"
HOST_TAG = "gitlab_knowledge/host"
PROCESS_START_TAG = "gitlab_knowledge/process_start"

def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Fail the in-process runs whose process died (kill -9, a crash), cancel the ones it created
    but never started, and give back every pool slot state they left: claimed slots, and steps
    queued for a slot, whether or not a slot was already assigned to them. Nothing else does it for a run the CLI started (Dagster's run
    monitoring watches the runs its own launcher started), and a slot held by a dead run, or
    assigned to a dead run's waiting step, makes every later run of the pool wait forever."""
    from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

    reaped = []
    # A run created but never started (its process killed in between: kill -9 where Ctrl-C would
    # have canceled it) holds nothing, yet would show NOT_STARTED for ever: it is canceled.
    statuses = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED]
    # Runs started in a process of ours carry its PID: the CLI's, and the project runs a batch run
    # (defs/batch.py) starts inside the daemon's run worker.
    for run in instance.get_runs(RunsFilter(statuses=statuses)):
        pid = run.tags.get(PID_TAG, "")
        if run.tags.get(HOST_TAG) != HOSTNAME or not pid.isdigit():
            continue
        if process_alive(int(pid), run.tags.get(PROCESS_START_TAG) or None) is not False:
            continue
        if run.status == DagsterRunStatus.NOT_STARTED:
            instance.report_run_canceled(run, f"the process that created this run (PID {pid}) ended before "
                                              "starting it: nothing was done")
        else:
            instance.report_run_failed(run, f"the process running this sync (PID {pid}) ended without finishing: "
                                            "killed or crashed; the next sync resumed from the cursor")
        reaped.append(run.run_id)
    terminal = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
    storage = instance.event_log_storage
    for run_id in _pool_run_ids(instance):
        held = instance.get_run_by_id(run_id)
        if held is None or held.status in terminal:
            storage.free_concurrency_slots_for_run(run_id)  # its claimed slots and its queued steps
    return reaped


def cancel_unstarted(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Cancel run `run_id` if it was created and never started (this process stopped in between);
    True if it was such a run."""
    from dagster._core.storage.dagster_run import DagsterRunStatus

    run = instance.get_run_by_id(run_id)
    if run is None or run.status != DagsterRunStatus.NOT_STARTED:
        return False
    instance.report_run_canceled(run, "stopped (Ctrl-C or SIGTERM) before the run started: nothing was done")
    return True


def _pool_run_ids(instance: dg.DagsterInstance) -> dict[str, str]:
    """run id -> pool, for every run holding a pool slot or queued for one."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return {}
    out: dict[str, str] = {}
    for pool in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(pool)
        for run_id in [s.run_id for s in info.claimed_slots] + [s.run_id for s in info.pending_steps]:
            out.setdefault(run_id, pool)
    return out


def refuse_if_busy(instance: dg.DagsterInstance, projects: Sequence[str], exclude: str | None = None) -> None:
    """Refuse at once (`SyncInProgressError`, exit 5) while another live run holds or waits for a
    pool slot, or runs one of `projects`. Started anyway, this run's first step would wait in the
    pool's queue for as long as the other run takes, and Dagster's in-process executor waits
    there in a busy loop that no Ctrl-C reaches. Call after `reap_dead_runs`: what is left is alive."""
    from dagster._core.storage.dagster_run import DagsterRunStatus

    live = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING]
    _refuse_if_projects_busy(instance, projects)
    for run_id, pool in _pool_run_ids(instance).items():
        if run_id == exclude:  # the asking run itself
            continue
        holder = instance.get_run_by_id(run_id)
        if holder is not None and holder.status in live:
            raise SyncInProgressError(f"another run is writing the store (Dagster run {run_id}, "
                                      f"{holder.tags.get(PROJECT_TAG) or holder.tags.get('dagster/partition') or holder.job_name}, "
                                      f"{_started_by(holder)}, pool {pool}): try again when it finishes")


def refuse_if_project_busy(instance: dg.DagsterInstance, project: str) -> None:
    """Refuse while another live run syncs `project` (one the UI launched while a batch ran)."""
    _refuse_if_projects_busy(instance, [project])


def _refuse_if_projects_busy(instance: dg.DagsterInstance, projects: Sequence[str]) -> None:
    """`refuse_if_project_busy` for each of `projects` in order, from one query of the live runs
    (a query per project was ~0.3-1 s of a 300-project sync's start, twice)."""
    from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

    newest: dict[str, Any] = {}
    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING])):
        newest.setdefault(run.tags.get("dagster/partition", ""), run)  # the newest run of each partition
    for project in projects:
        if project in newest:
            run = newest[project]
            raise SyncInProgressError(f"a run of {project} is already in progress (Dagster run {run.run_id}, "
                                      f"{_started_by(run)}): try again when it finishes")


def _started_by(run: Any) -> str:
    if run.tags.get(TRIGGER_TAG) == "cli":
        return f"a CLI command, PID {run.tags.get(PID_TAG, '?')}"
    return "started from Dagster (UI, sensor or schedule)"


@contextlib.contextmanager
def holding_pools(instance: dg.DagsterInstance, run_id: str, step_key: str, pools: Sequence[str]) -> Iterator[None]:
    """Hold a slot of each of `pools` for one step that writes every store (the batch's, which
    carries many projects through every layer): a run the UI launches meanwhile waits in the pools'
    queue, as it waited for the steps of a partition run. `SyncInProgressError` at once if a slot is
    taken (the caller waits, interruptibly, and asks again); the reaper frees the slots of a run
    whose process died."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        yield
        return
    default = storage.get_pool_config().default_pool_limit
    try:
        for pool in pools:
            limits = {p.name: p for p in storage.get_pool_limits()}
            if pool not in limits and default is not None:  # as Dagster's executor does for a step
                storage.initialize_concurrency_limit_to_default(pool)
                limits = {p.name: p for p in storage.get_pool_limits()}
            if pool not in limits:  # a pool without a limit: nothing to hold
                continue
            if not storage.claim_concurrency_slot(pool, run_id, step_key).is_claimed:
                raise SyncInProgressError(f"another run holds the {pool} pool: try again when it finishes")
        yield
    finally:
        storage.free_concurrency_slot_for_step(run_id, step_key)
