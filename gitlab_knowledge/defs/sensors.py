"""The change sensor: every 10 minutes, probe each project and run the sync for those that changed.

It asks GitLab two cheap questions per project (sync/probe.py) and never advances anything
itself. A run key made of the project, what GitLab looked like, and how many runs of that project
failed since its last success makes a retried tick request the same runs (Dagster drops repeated
keys) while a failed sync is still retried on the next tick. Projects added to the config become
partitions here, without a code change.
"""

import os

import dagster as dg

from gitlab_knowledge.defs.jobs import sync_project_job
from gitlab_knowledge.defs.partitions import PARTITIONS_NAME, project_partitions
from gitlab_knowledge.errors import StoreBusyError
from gitlab_knowledge.workspace import Workspace

# Knobs read when the definitions load: the interval (an end-to-end test watches ticks within
# seconds), and GITLAB_KNOWLEDGE_AUTOMATION=off to have the sensor and schedules start stopped
# (they can then be switched on one by one in the UI).
INTERVAL_SECONDS = int(os.environ.get("GITLAB_KNOWLEDGE_SENSOR_INTERVAL", "600"))
AUTOMATION_ON = os.environ.get("GITLAB_KNOWLEDGE_AUTOMATION", "on").strip().lower() not in ("off", "0", "false", "no")
SENSOR_STATUS = dg.DefaultSensorStatus.RUNNING if AUTOMATION_ON else dg.DefaultSensorStatus.STOPPED
SCHEDULE_STATUS = dg.DefaultScheduleStatus.RUNNING if AUTOMATION_ON else dg.DefaultScheduleStatus.STOPPED
TRIGGER_TAG = "gitlab_knowledge/trigger"
PROJECT_TAG = "gitlab_knowledge/project"
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]


def failures_since_success(instance: dg.DagsterInstance, project: str) -> int:
    records = instance.get_run_records(
        dg.RunsFilter(job_name=sync_project_job.name, tags={"dagster/partition": project}), limit=25)
    count = 0
    for record in records:  # newest first
        status = record.dagster_run.status
        if status == dg.DagsterRunStatus.SUCCESS:
            break
        if status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
            count += 1
    return count


def in_flight(instance: dg.DagsterInstance, project: str) -> bool:
    return bool(instance.get_run_records(
        dg.RunsFilter(job_name=sync_project_job.name, tags={"dagster/partition": project}, statuses=IN_FLIGHT),
        limit=1))


@dg.sensor(
    name="gitlab_change_sensor",
    job=sync_project_job,
    minimum_interval_seconds=INTERVAL_SECONDS,
    default_status=SENSOR_STATUS,
    description="Probes each configured GitLab project (2 API calls) and syncs those that changed.",
)
def gitlab_change_sensor(context: dg.SensorEvaluationContext,
                         workspace: dg.ResourceParam[Workspace]) -> dg.SensorResult:
    from gitlab_knowledge.sync.probe import probe_projects

    config = workspace.config
    existing = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    new = [p for p in config.projects if p not in existing]
    partition_requests = [project_partitions.build_add_request(new)] if new else []
    try:
        probes = probe_projects(workspace)
    except StoreBusyError as exc:
        return dg.SensorResult(dynamic_partitions_requests=partition_requests,
                               skip_reason=f"store busy, probing on the next tick: {exc}")
    failed = [p for p in probes if p.error is not None]
    if probes and len(failed) == len(probes):
        raise dg.DagsterError(f"probe failed: {failed[0].error}")  # GitLab down or the token rejected: a failed tick says so
    requests = []
    notes = []
    for probe in probes:
        if not probe.changed:
            notes.append(f"{probe.project}: " + ("; ".join(probe.reasons) or "no change"))
            continue
        if in_flight(context.instance, probe.project):
            notes.append(f"{probe.project}: changed, but a sync is already running")
            continue
        attempt = failures_since_success(context.instance, probe.project)
        requests.append(dg.RunRequest(
            run_key=f"{probe.project}|{probe.fingerprint}|attempt={attempt}",
            partition_key=probe.project,
            tags={TRIGGER_TAG: "sensor", PROJECT_TAG: probe.project},
        ))
        context.log.info(f"{probe.project}: {'; '.join(probe.reasons)}")
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests,
                           skip_reason=None if requests else "; ".join(notes) or "no project changed")
