"""One run for many projects: what the change sensor and the weekly reconciliation launch.

A run the daemon launches pays a fixed cost before any work: a new process, importing Dagster and
the definitions, opening the instance, loading the embedding model (docs/ARCHITECTURE.md, "One
run per tick", has the measurements). One run per changed project paid it once per project, and
the runs then waited for each other on the DuckDB writer pool. The batch run pays it once: its
one op hands every project it names to the runner (`run_sync`, the function the CLI calls), which
runs each project's `sync_project` job in this process, one after the other, with the workspace
(and its loaded model) shared. Each project is still its own partition run, tagged with the batch
run's id: the UI shows per-project materializations, checks, lineage and failures exactly as
before, and the sensor's per-partition history (backoff, in-flight) reads the same runs.

One project failing does not stop the others (their layers commit in their own runs); the batch
fails at the end with one line naming each failed project. An interrupt (the UI's Terminate,
`ui` stopping) stops after the project in progress, whose run is recorded as canceled.
"""

import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg

from gitlab_knowledge.defs.failures import plain_failure, said_plainly, tag_cause
from gitlab_knowledge.defs.jobs import QUIET_LOGS
from gitlab_knowledge.defs.run_slots import TRIGGER_TAG
from gitlab_knowledge.errors import Interrupted, SyncInProgressError, is_interrupt
from gitlab_knowledge.sync.runs import pipeline_lock
from gitlab_knowledge.workspace import Workspace

if TYPE_CHECKING:
    from gitlab_knowledge.defs.runner import ProjectOutcome

# Definitions copy a sensor or schedule whose target is an op job (this one) to bind its
# resources, and Dagster 1.13 passes the copy an empty `owners`, which warns that the (unused)
# parameter is in beta: on every command that loads the definitions.
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer", category=dg.BetaWarning)

BATCH_JOB = "sync_projects"
BATCH_OP = "sync_each_project"
BATCH_TAG = "gitlab_knowledge/batch"  # on each project's run: the id of the batch run that ran it
RETRY_TAG = "gitlab_knowledge/retry"  # on a project's run the sensor asked for as a retry on backoff
# How long a batch waits for another live run (one the UI launched) to leave the pools before it
# gives up: its steps would otherwise wait in the in-process executor's busy loop, which no
# Terminate reaches.
WAIT_FOR_POOLS_S = 900.0
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


class BatchConfig(dg.Config):
    projects: list[str] = []  # empty: every configured project
    full: bool = False  # a full sync (what the weekly reconciliation asks)
    force: bool = False
    retry: dict[str, str] = {}  # project -> retry kind, for the projects the sensor retries on backoff


def batch_run_config(projects: list[str], *, full: bool = False, retry: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"ops": {BATCH_OP: {"config": {"projects": list(projects), "full": full, "retry": dict(retry or {})}}},
            **QUIET_LOGS}


def batch_projects(run: Any, configured: list[str]) -> list[str]:
    """The projects a batch run names (every configured one when it names none)."""
    config = (run.run_config or {}).get("ops", {}).get(BATCH_OP, {}).get("config", {})
    return list(config.get("projects") or configured)


def projects_in_flight(instance: dg.DagsterInstance, configured: list[str]) -> set[str]:
    """Every project a batch run queued or in progress will sync."""
    out: set[str] = set()
    for run in instance.get_runs(dg.RunsFilter(job_name=BATCH_JOB, statuses=IN_FLIGHT)):
        out.update(batch_projects(run, configured))
    return out


@dg.op(name=BATCH_OP, description="Runs the sync_project job of each project named in its config (all configured "
                                  "projects if none), one after the other in this process: one partition run each.")
def sync_each_project(context: dg.OpExecutionContext, config: BatchConfig,
                      workspace: dg.ResourceParam[Workspace]) -> dg.Output[None]:
    from dagster._core.errors import DagsterExecutionInterruptedError

    projects = config.projects or list(workspace.config.projects)
    try:
        outcomes = _run_all(context, config, workspace, projects)
    except BaseException as exc:
        if is_interrupt(exc):  # Dagster's interrupt may also leave the project run in progress as it was
            _cancel_in_progress(context)
        raise
    interrupted = [o for o in outcomes if is_interrupt(o.error)]
    if interrupted:  # the project's run stopped with the batch: canceled, not failed
        _cancel_in_progress(context, [o.run_id for o in interrupted])
        raise DagsterExecutionInterruptedError(f"stopped during {interrupted[0].project}")
    for outcome in outcomes:
        context.log.info(f"{outcome.project}: {'ok' if outcome.success else outcome.message} "
                         f"in {outcome.duration_s:.1f}s (run {outcome.run_id[:8]})")
    failed = [o for o in outcomes if not o.success]
    skipped = len(projects) - len(outcomes)  # a failure not specific to one project stopped the batch
    if failed:
        line = (f"{len(failed)} of {len(projects)} project(s) failed: "
                + "; ".join(f"{o.project}: {o.message}" for o in failed)
                + (f"; {skipped} project(s) not attempted after it" if skipped else ""))
        tag_cause(context, line)
        raise plain_failure(line, {"failed": [o.project for o in failed],
                                   "runs": {o.project: o.run_id for o in outcomes}})
    return dg.Output(None, metadata={"projects": len(outcomes),
                                     "runs": {o.project: o.run_id for o in outcomes},
                                     "duration_s": round(sum(o.duration_s for o in outcomes), 2)})


def _run_all(context: dg.OpExecutionContext, config: BatchConfig, workspace: Workspace,
             projects: list[str]) -> "list[ProjectOutcome]":
    from dagster._core.errors import DagsterExecutionInterruptedError

    from gitlab_knowledge.defs.runner import run_sync  # the runner loads the definitions: late

    tags = {TRIGGER_TAG: context.run.tags.get(TRIGGER_TAG, "ui"), BATCH_TAG: context.run_id}
    retry = {p: {RETRY_TAG: kind} for p, kind in config.retry.items()}
    deadline = time.monotonic() + WAIT_FOR_POOLS_S
    with said_plainly(context):
        while True:  # a CLI sync holding the data directory's lock: wait for it, as for the pools
            try:
                with pipeline_lock(workspace.config.data_dir, "sync"):
                    return run_sync(workspace, projects, full=config.full, force=config.force,
                                    instance=context.instance, tags=tags, project_tags=retry,
                                    wait_s=max(deadline - time.monotonic(), 0))
            except SyncInProgressError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(2.0)
            except Interrupted as exc:  # between two project runs: the batch is stopped, not failed
                raise DagsterExecutionInterruptedError(str(exc)) from None


def _cancel_in_progress(context: dg.OpExecutionContext, stopped: list[str] | None = None) -> None:
    """Record as canceled this batch's project runs still in progress, and the `stopped` ones. An
    interrupt that reaches a project run records it failed ("interrupted unexpectedly": only the
    batch run was asked to terminate), so that one is canceled too."""
    runs = context.instance.get_runs(dg.RunsFilter(tags={BATCH_TAG: context.run_id}))
    ids = {r.run_id for r in runs if r.status in IN_FLIGHT
           or r.tags.get("dagster/failure_reason") == "UNEXPECTED_TERMINATION"} | set(stopped or [])
    for run_id in ids:
        run = context.instance.get_run_by_id(run_id)
        if run is not None and run.status != dg.DagsterRunStatus.CANCELED:
            context.instance.report_run_canceled(run, "its batch run was stopped while it was in progress")


@dg.job(name=BATCH_JOB, executor_def=dg.in_process_executor, config=batch_run_config([]),
        description="Sync many projects in one run: the change sensor's run per tick (every project that changed) "
                    "and the weekly reconciliation's. Each project is still its own sync_project partition run.")
def sync_projects_job() -> None:
    sync_each_project()
