"""The change sensor: every 10 minutes, probe each project and run the sync for those that changed.

All the projects one tick finds due go into one run of the batch job (defs/batch.py), which
carries them all through the layers in one step: the fixed cost of a run is paid once per tick, not
once per project, and the projects never queue behind each other for the DuckDB writer. A
project's history (backoff, retries) is its own partition runs and the batch runs that carried
it, each of which records the projects it left unfinished.

It asks GitLab three cheap questions per project (sync/probe.py) and the store what work is left
(defs/due.py), and never advances anything itself. The decision is `due.decide`, a pure function
of those facts; its run key is built from facts that move whenever a run does work, so work that
remains always gets a new key while a retried tick over the same state repeats its key (Dagster
drops the repeat). A failed sync with nothing new to fetch, and documents whose embedding failed
(a provider outage), are retried on a backoff of 1, 2, 4 … intervals, each retry its own key. Projects added to the config become
partitions here, without a code change.
"""

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg

from gitlab_knowledge.backlog import digest
from gitlab_knowledge.defs.batch import (
    BATCH_JOB,
    BATCH_OP,
    RETRY_TAG,
    batch_projects,
    batch_run_config,
    projects_in_flight,
    sync_projects_job,
    unfinished_projects,
)
from gitlab_knowledge.defs.jobs import sync_project_job
from gitlab_knowledge.defs.partitions import PARTITIONS_NAME, project_partitions
from gitlab_knowledge.defs.run_slots import PROJECT_TAG, TRIGGER_TAG, reap_dead_runs
from gitlab_knowledge.errors import StoreBusyError
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

if TYPE_CHECKING:
    from gitlab_knowledge.defs.due import RunHistory

# Knobs read when the definitions load: the interval (an end-to-end test watches ticks within
# seconds), and GITLAB_KNOWLEDGE_AUTOMATION=off to have the sensor and schedules start stopped
# (they can then be switched on one by one in the UI).
INTERVAL_SECONDS = int(os.environ.get("GITLAB_KNOWLEDGE_SENSOR_INTERVAL", "600"))
REAPER_INTERVAL_SECONDS = min(60, INTERVAL_SECONDS)
AUTOMATION_ON = os.environ.get("GITLAB_KNOWLEDGE_AUTOMATION", "on").strip().lower() not in ("off", "0", "false", "no")
SENSOR_STATUS = dg.DefaultSensorStatus.RUNNING if AUTOMATION_ON else dg.DefaultSensorStatus.STOPPED
SCHEDULE_STATUS = dg.DefaultScheduleStatus.RUNNING if AUTOMATION_ON else dg.DefaultScheduleStatus.STOPPED
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]
__all__ = ["RETRY_TAG", "gitlab_change_sensor", "dead_run_reaper"]


def run_history(instance: dg.DagsterInstance, project: str,
                batches: "list[dg.RunRecord] | None" = None, configured: list[str] | None = None) -> "RunHistory":
    """Consecutive failed runs since the last success, and consecutive embedding retries: the
    project's own partition runs and the finished batch runs that carried it (`finished_batches`,
    read once a tick), newest first."""
    from gitlab_knowledge.defs.due import RETRY_EMBEDDINGS, RunHistory

    records = instance.get_run_records(
        dg.RunsFilter(job_name=sync_project_job.name, tags={"dagster/partition": project}), limit=25)
    attempts = [(_ended(r), r.dagster_run.status, r.dagster_run.tags.get(RETRY_TAG)) for r in records]
    for record in batches if batches is not None else finished_batches(instance):
        run = record.dagster_run
        if project not in batch_projects(run, configured or [project]):
            continue
        unfinished = unfinished_projects(run)
        if run.status == dg.DagsterRunStatus.SUCCESS or (unfinished is not None and project not in unfinished):
            status = dg.DagsterRunStatus.SUCCESS
        else:  # its layers did not all commit: failed, canceled, or the run died (no record of its own)
            status = run.status
        ops: dict[str, Any] = dict(run.run_config or {}).get("ops", {})  # type: ignore[assignment]
        kinds: dict[str, str] = ops.get(BATCH_OP, {}).get("config", {}).get("retry") or {}
        attempts.append((_ended(record), status, kinds.get(project)))
    attempts.sort(key=lambda a: a[0], reverse=True)  # newest first
    failed, failed_at = 0, None
    for ended, status, _retry in attempts:
        if status == dg.DagsterRunStatus.SUCCESS:
            break
        if status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
            failed += 1
            if failed_at is None:
                failed_at = datetime.fromtimestamp(ended, UTC).replace(tzinfo=None)
    retries = 0
    for _ended_at, _status, retry in attempts:
        if retry != RETRY_EMBEDDINGS:
            break
        retries += 1
    return RunHistory(failed=failed, failed_at=failed_at, embedding_retries=retries, now=utcnow())


def finished_batches(instance: dg.DagsterInstance, limit: int = 50) -> "list[dg.RunRecord]":
    """The newest finished batch runs: each carries a record of the projects it left unfinished."""
    done = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
    return list(instance.get_run_records(dg.RunsFilter(job_name=BATCH_JOB, statuses=done), limit=limit))


def _ended(record: "dg.RunRecord") -> float:
    return record.end_time or record.update_timestamp.timestamp()


def in_flight(instance: dg.DagsterInstance, project: str) -> bool:
    return bool(instance.get_run_records(
        dg.RunsFilter(job_name=sync_project_job.name, tags={"dagster/partition": project}, statuses=IN_FLIGHT),
        limit=1))


def last_batch(instance: dg.DagsterInstance) -> str:
    """The id of the newest finished batch run ("" if none): part of the batch's run key, so a
    batch that failed as a whole (before any project's run recorded a failure) is followed by a
    new key, while a tick retried before anything finished repeats its key."""
    done = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
    records = instance.get_run_records(dg.RunsFilter(job_name=BATCH_JOB, statuses=done), limit=1)
    return records[0].dagster_run.run_id if records else ""


@dg.sensor(
    name="gitlab_change_sensor",
    job=sync_projects_job,
    minimum_interval_seconds=INTERVAL_SECONDS,
    default_status=SENSOR_STATUS,
    description="Probes each configured GitLab project (3 API calls) and syncs those that changed or that "
                "have work left: pending thread rechecks, a layer behind its upstream, failed embeddings.",
)
def gitlab_change_sensor(context: dg.SensorEvaluationContext,
                         workspace: dg.ResourceParam[Workspace]) -> dg.SensorResult:
    from gitlab_knowledge.backlog import backlog
    from gitlab_knowledge.defs.due import decide
    from gitlab_knowledge.store.groups import configured_projects
    from gitlab_knowledge.sync.probe import probe_projects

    config = workspace.config
    existing = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    new = [p for p in config.projects if p not in existing]
    partition_requests = [project_partitions.build_add_request(new)] if new else []
    try:
        projects = configured_projects(workspace)  # `projects`, then the groups' members (defs/discovery.py)
        probes = probe_projects(workspace, projects)
        work = backlog(workspace, projects)
    except StoreBusyError as exc:
        return dg.SensorResult(dynamic_partitions_requests=partition_requests,
                               skip_reason=f"store busy, probing on the next tick: {exc}")
    new += [p for p in projects if p not in existing and p not in new]  # a member discovery has not added yet
    partition_requests = [project_partitions.build_add_request(new)] if new else []
    failed = [p for p in probes if p.error is not None]
    if probes and len(failed) == len(probes):
        raise dg.DagsterError(f"probe failed: {failed[0].error}")  # GitLab down or the token rejected
    batched = projects_in_flight(context.instance, list(projects))
    batches = finished_batches(context.instance)  # the per-project history of the batch runs, read once
    due: dict[str, str] = {}  # project -> its run key
    retry: dict[str, str] = {}
    notes = []
    for probe in probes:
        history = run_history(context.instance, probe.project, batches, list(projects))
        busy = probe.project in batched or in_flight(context.instance, probe.project)
        decision = decide(probe, work.get(probe.project), in_flight=busy, attempt=history.failed,
                          now=probe.gitlab_now, history=history, interval_seconds=INTERVAL_SECONDS)
        if not decision.run:
            notes.append(decision.skip)
            continue
        due[probe.project] = decision.run_key
        if decision.retry:
            retry[probe.project] = decision.retry
        context.log.info(f"{probe.project}: {'; '.join(decision.reasons)}")
    requests = []
    if due:
        # One run for every project due: its key moves whenever one project's key does.
        key = f"batch|{len(due)}|{digest(list(due.values()))}|after={last_batch(context.instance)}"
        tags = {TRIGGER_TAG: "sensor", PROJECT_TAG: _named(list(due))}
        requests.append(dg.RunRequest(run_key=key, run_config=batch_run_config(list(due), retry=retry), tags=tags))
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests,
                           skip_reason=None if requests else "; ".join(notes) or "no project changed")


def _named(projects: list[str], limit: int = 200) -> str:
    """The projects of a batch as one tag value the UI's run list shows (cut past `limit` characters)."""
    text = ", ".join(projects)
    return text if len(text) <= limit else text[:limit].rsplit(", ", 1)[0] + f", … ({len(projects)} projects)"


@dg.sensor(
    name="dead_run_reaper",
    minimum_interval_seconds=REAPER_INTERVAL_SECONDS,
    default_status=SENSOR_STATUS,
    description="Fails the runs whose process died (kill -9, a crash) and frees the pool slots they held, so a "
                "dead CLI sync or a force-terminated run never blocks the runs behind it.",
)
def dead_run_reaper(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    # Dagster 1.13 marks a tick SUCCESS only when it launches a run (or reacts to one, as a run
    # status sensor does); a tick that reaped something stays SKIPPED. So such a tick says what it
    # reaped in its skip reason and moves the cursor (the sensor page shows the last reaping), and
    # each reaped run carries the reason in its own event log.
    reaped = reap_dead_runs(context.instance)
    if not reaped:
        return dg.SensorResult(skip_reason="no dead run")
    for run_id in reaped:
        context.log.warning(f"run {run_id}: its process is gone; marked failed and its pool slots freed")
    total = int(context.cursor.split(" ", 1)[0]) if context.cursor and context.cursor[0].isdigit() else 0
    names = ", ".join(run_id[:8] for run_id in reaped)
    return dg.SensorResult(
        skip_reason=f"reaped {len(reaped)} dead run(s): {names} (marked failed, pool slots freed)",
        cursor=f"{total + len(reaped)} run(s) reaped, last at {utcnow():%Y-%m-%d %H:%M:%S} UTC: {names}")
