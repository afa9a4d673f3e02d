"""One run for many projects: what the change sensor, the weekly reconciliation and the CLI's sync
of several projects run.

A run pays a fixed cost before any work (a new process, imports, the instance, the model), and a
`sync_project` partition run pays Dagster's own per run (run and step events, a step per asset and
per check group: ~8 s a project under load), while inside the layers a Tantivy commit and a LanceDB
write and compaction are a fixed cost per call. A batch run pays each once: its one step carries
every project it names through the layers (defs/many_projects.py: the same layer functions a
partition run's assets call, the index layers for all projects at once), holding the three
stores' pool slots for the whole step. docs/ARCHITECTURE.md, "One run per tick", has the
measurements.

The UI still shows each project on its own: the step records, on each project's partition, the
materialization of every layer it committed (with that layer's stats for that project, as its own
run would), the per-partition check results, and a failed materialization where a project's layer
failed. One project failing skips its later layers and spares the others; the batch fails at the
end with one line naming each failed project. The run's `UNFINISHED_TAG` lists the projects whose
layers did not all commit, which the change sensor's per-project history reads (backoff, retry)
beside the project's own partition runs. An interrupt (the UI's Terminate, `ui` stopping) ends the
run canceled, with what it committed recorded.
"""

import contextlib
import json
import os
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from gitlab_knowledge.defs.checks import aimed_at_latest, evaluate_partitions
from gitlab_knowledge.defs.event_batch import EventBatch
from gitlab_knowledge.defs.failures import original, plain_failure, said_plainly, tag_cause
from gitlab_knowledge.defs.jobs import QUIET_LOGS
from gitlab_knowledge.defs.many_projects import FINISHED, Batch, Carried, carry
from gitlab_knowledge.defs.partitions import ensure_partitions
from gitlab_knowledge.defs.run_slots import (
    HOST_TAG,
    PID_TAG,
    PROCESS_START_TAG,
    holding_pools,
    reap_dead_runs,
)
from gitlab_knowledge.errors import Interrupted, KnowledgeError, SyncInProgressError, is_interrupt
from gitlab_knowledge.layers import (
    DOCUMENTS,
    DUCKDB_POOL,
    EMBEDDINGS,
    LANCEDB_POOL,
    LAYERS,
    LEXICAL,
    TANTIVY_POOL,
    Layer,
)
from gitlab_knowledge.redact import redact
from gitlab_knowledge.sync.runs import HOSTNAME, pipeline_lock, process_start
from gitlab_knowledge.workspace import Workspace

# Definitions copy a sensor or schedule whose target is an op job (this one) to bind its
# resources, and Dagster 1.13 passes the copy an empty `owners`, which warns that the (unused)
# parameter is in beta: on every command that loads the definitions.
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer", category=dg.BetaWarning)

BATCH_JOB = "sync_projects"
BATCH_OP = "sync_each_project"
BATCH_TAG = "gitlab_knowledge/batch"  # the id of the batch run (on the runs of an older version's batches)
RETRY_TAG = "gitlab_knowledge/retry"  # on a project's run the sensor asked for as a retry on backoff
UNFINISHED_TAG = "gitlab_knowledge/unfinished"  # on a finished batch run: JSON list of projects not all committed
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


@dg.op(name=BATCH_OP,
       description="Carries every project named in its config (all configured projects if none) through the "
                   "layers in this one step, recording each project's materializations and checks on its partition.")
def sync_each_project(context: dg.OpExecutionContext, config: BatchConfig,
                      workspace: dg.ResourceParam[Workspace]) -> Iterator[Any]:
    from dagster._core.errors import DagsterExecutionInterruptedError

    projects = list(dict.fromkeys(config.projects or workspace.config.projects))
    batch = Batch({p: Carried(p) for p in projects})
    FINISHED[context.run_id] = batch  # read (and dropped) by the in-process runner; a daemon's run process ends
    tag_process(context)
    started = time.monotonic()
    events = EventBatch(context)  # the partitions' events, written many per transaction
    recorded: Counter[str] = Counter()  # asset -> materializations added so far
    checked: set[str] | None = None  # the assets whose checks were recorded before the embeddings layer
    try:
        for project, layer, metadata in _carry_all(context, config, workspace, projects, batch):
            events.add(dg.AssetMaterialization(asset_key=layer.asset, partition=project, metadata=metadata))
            recorded[layer.asset] += 1
            if _write_now(batch, layer, events, recorded[layer.asset]):
                events.flush()
            if (layer is LEXICAL and checked is None and batch.bulk
                    and _all_recorded(batch, layer, recorded[layer.asset])):
                # Every layer but the embeddings is done, and the embeddings layer has bulk to embed
                # (a first sync: its longest part): their checks now, shown in the UI meanwhile. A
                # tick's embeddings take milliseconds: its checks are evaluated once, after them
                # (two evaluations cost a one-note batch run ~0.08 s more).
                checked = {each.asset for each in LAYERS if each is not EMBEDDINGS}
                _check(context, workspace, batch, events, assets=checked, caught_up=False)
    except BaseException as exc:
        with contextlib.suppress(Exception):  # what committed is recorded; Dagster's storage failing is the error
            events.flush()
        for carried in batch.carried.values():  # what the in-process runner reports for each
            if carried.error is None and len(carried.done) < len(LAYERS):
                carried.error = original(exc) if isinstance(exc, Exception) else exc
        _record_unfinished(context, batch.unfinished)
        if is_interrupt(exc):  # stopped (the UI's Terminate, `ui` stopping): canceled, not failed
            raise DagsterExecutionInterruptedError(f"stopped after {_progress(batch)}") from None
        raise
    _check(context, workspace, batch, events, assets=None if checked is None else {EMBEDDINGS.asset}, caught_up=True)
    _failed_to_materialize(context, batch)
    _record_unfinished(context, batch.unfinished)
    # One log line per batch, not per project: each is an event (a commit) of its own.
    context.log.info("\n".join(f"{c.project}: {'ok' if c.error is None else _message(c.error)} in {c.duration_s:.1f}s"
                               for c in batch.carried.values()))
    failed = batch.failed
    skipped = len(batch.unfinished) - len(failed)
    if failed or skipped:
        line = (f"{len(failed)} of {len(projects)} project(s) failed: "
                + "; ".join(f"{c.project}: {_message(c.error)}" for c in failed)
                + (f"; {skipped} project(s) not attempted after it" if skipped else ""))
        tag_cause(context, line)
        raise plain_failure(line, {"failed": [c.project for c in failed], "unfinished": batch.unfinished})
    yield dg.Output(None, metadata={"projects": len(projects), "duration_s": round(time.monotonic() - started, 2)})


def _carry_all(context: dg.OpExecutionContext, config: BatchConfig, workspace: Workspace, projects: list[str],
               batch: Batch) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    from dagster._core.errors import DagsterExecutionInterruptedError

    from gitlab_knowledge.defs.runner import wait_until_free

    deadline = time.monotonic() + WAIT_FOR_POOLS_S
    with said_plainly(context):
        while True:  # a CLI sync holding the data directory's lock: wait for it, as for the pools
            try:
                with pipeline_lock(workspace.config.data_dir, "sync"):
                    reap_dead_runs(context.instance)
                    wait_until_free(context.instance, projects, max(deadline - time.monotonic(), 0),
                                    exclude=context.run_id)
                    ensure_partitions(context.instance, projects)
                    with holding_pools(context.instance, context.run_id, BATCH_OP,
                                       [DUCKDB_POOL, TANTIVY_POOL, LANCEDB_POOL]):
                        yield from carry(workspace, projects, batch, full=config.full, force=config.force,
                                         run_id=context.run_id, progress=workspace.progress_for(context.log),
                                         log=context.log)
                    return
            except SyncInProgressError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(2.0)
            except Interrupted as exc:
                raise DagsterExecutionInterruptedError(str(exc)) from None


def _check(context: dg.OpExecutionContext, workspace: Workspace, batch: Batch, events: EventBatch, *,
           assets: set[str] | None, caught_up: bool) -> None:
    """Record the checks of `assets` (all if None) on each project's partition (`evaluate_partitions`)."""
    events.flush()  # before the check results, which point at the partitions' latest materializations
    evaluated = evaluate_partitions(workspace, {p: c.done for p, c in batch.carried.items()}, assets=assets,
                                    caught_up=caught_up)
    for evaluation in aimed_at_latest(context.instance, evaluated):
        events.add(evaluation)
    events.flush()


def _write_now(batch: Batch, layer: Layer, events: EventBatch, recorded: int) -> bool:
    """Whether the held events are written now: after a project's last DuckDB layer once they
    have waited a while (a commit per project would cost more than its events), or when no
    project has `layer` still to come and every one that has it is recorded (`recorded` of
    them so far: a group of projects gets the layer's metadata at once, before its
    materializations are added one by one); that is the last project, or the end of an index
    layer, which records every project at once and may be followed by a long step. The UI so
    lags a project's layers by at most HOLD_S or one group's time."""
    if layer.pool == DUCKDB_POOL and layer is not DOCUMENTS:  # the project's next layer follows at once
        return False
    return events.held_long or _all_recorded(batch, layer, recorded)


def _all_recorded(batch: Batch, layer: Layer, recorded: int) -> bool:
    """Whether no project has `layer` still to come and every one that has it is recorded
    (`recorded` of them so far)."""
    carried = batch.carried.values()
    return (all(layer.asset in c.metadata or c.error is not None for c in carried)
            and recorded == sum(1 for c in carried if layer.asset in c.metadata))


def tag_process(context: dg.OpExecutionContext) -> None:
    """Tag the run with this process, so the reaper fails it (and frees its pool slot) if the
    process dies; a run the CLI started carries the tags already."""
    if PID_TAG in context.run.tags:
        return
    with contextlib.suppress(Exception):
        context.instance.add_run_tags(context.run_id, {PID_TAG: str(os.getpid()), HOST_TAG: HOSTNAME,
                                                        PROCESS_START_TAG: process_start(os.getpid()) or ""})


def _record_unfinished(context: dg.OpExecutionContext, projects: list[str]) -> None:
    """The per-project record the change sensor's history reads (`unfinished_projects`)."""
    with contextlib.suppress(Exception):
        context.instance.add_run_tags(context.run_id, {UNFINISHED_TAG: json.dumps(sorted(projects))})


def unfinished_projects(run: Any) -> set[str] | None:
    """The projects a finished batch run left unfinished, or None where it recorded none (a run
    that died: every project it names counts as unfinished)."""
    value = run.tags.get(UNFINISHED_TAG)
    if value is None:
        return None
    try:
        return set(json.loads(value))
    except ValueError:
        return None


def _failed_to_materialize(context: dg.OpExecutionContext, batch: Batch) -> None:
    """Mark the partitions a failed project did not materialize as failed, as its own run would.
    Dagster's SQLite event log keeps no "failed to materialize" event; the UI derives a failed
    partition from a materialization planned by a run that failed without it, so that is what is
    recorded (for the failed projects only: a planned event per partition of every project would
    cost thousands of writes in a large batch)."""
    from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent

    for carried in batch.failed:
        for layer in LAYERS:
            if layer.asset in carried.metadata:
                continue
            planned = AssetMaterializationPlannedData(dg.AssetKey(layer.asset), partition=carried.project)
            event = DagsterEvent.build_asset_materialization_planned_event(context.job_name, context.op_handle.name,
                                                                           planned)
            with contextlib.suppress(Exception):  # the record in the UI must not hide the failure itself
                context.instance.report_dagster_event(event, run_id=context.run_id)


def _message(error: BaseException | None) -> str:
    if error is None:
        return ""
    if isinstance(error, KnowledgeError):
        return str(error)
    return redact(f"{type(error).__name__}: {error}")


def _progress(batch: Batch) -> str:
    done = sum(1 for c in batch.carried.values() if len(c.done) == len(LAYERS))
    return f"{done} of {len(batch.carried)} project(s) finished every layer"


@dg.job(name=BATCH_JOB, executor_def=dg.in_process_executor, config=batch_run_config([]),
        description="Sync many projects in one run: the change sensor's run per tick (every project that changed), "
                    "the weekly reconciliation's and the CLI's sync of several projects. Each project's layers and "
                    "checks are recorded on its own partition.")
def sync_projects_job() -> None:
    sync_each_project()
