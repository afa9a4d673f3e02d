"""Schedules: the weekly full reconciliation, and the freshness check between syncs."""

import dagster as dg

from gitlab_knowledge.defs.batch import batch_run_config, sync_projects_job
from gitlab_knowledge.defs.checks import projects_synced_recently
from gitlab_knowledge.defs.jobs import QUIET_LOGS
from gitlab_knowledge.defs.partitions import ensure_partitions
from gitlab_knowledge.defs.run_slots import TRIGGER_TAG
from gitlab_knowledge.defs.sensors import SCHEDULE_STATUS
from gitlab_knowledge.workspace import Workspace

freshness_job = dg.define_asset_job(
    "sync_freshness",
    selection=dg.AssetSelection.checks(projects_synced_recently),
    executor_def=dg.in_process_executor,
    config=QUIET_LOGS,  # every 15 minutes: INFO on the daemon's terminal, not every DEBUG engine event
    description="Warns when a project's last successful sync is older than 30 minutes.",
)


@dg.schedule(
    name="weekly_full_reconciliation",
    job=sync_projects_job,
    cron_schedule="0 3 * * 0",
    execution_timezone="UTC",
    default_status=SCHEDULE_STATUS,
    description="Sundays 03:00 UTC: a full sync of every project, which removes what GitLab no longer lists "
                "(deletions are invisible to incremental syncs). One batch run: each project its own partition run.",
)
def weekly_full_reconciliation(context: dg.ScheduleEvaluationContext,
                               workspace: dg.ResourceParam[Workspace]) -> list[dg.RunRequest]:
    from gitlab_knowledge.store.groups import configured_projects

    projects = configured_projects(workspace)  # the groups' members too, as their last listing found them
    ensure_partitions(context.instance, projects)
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    # One run for all of them (defs/batch.py): the fixed cost of a run once, not once per project.
    return [dg.RunRequest(run_key=f"full|{day}", run_config=batch_run_config(list(projects), full=True),
                          tags={TRIGGER_TAG: "weekly-full"})]


freshness_schedule = dg.ScheduleDefinition(
    name="sync_freshness_check",
    job=freshness_job,
    cron_schedule="*/15 * * * *",
    default_status=SCHEDULE_STATUS,
    description="Evaluates projects_synced_recently every 15 minutes, so a stalled sync shows up even "
                "when nothing else runs.",
)
