"""The distributed deployment's Dagster definitions: the repository's own (defs.build_defs), with
every step run by Celery workers and the embedding fanned out over them.

    dagster-webserver -w gitlab_knowledge/scaleout/workspace.yaml   (and dagster-daemon run)
    dagster-celery worker start -A dagster_celery.app -y gitlab_knowledge/scaleout/celery.yaml

What changes from `gitlab_knowledge.defs`: the executor (celery_executor, broker and result backend
from $DAGSTER_CELERY_BROKER_URL and $DAGSTER_CELERY_BACKEND_URL) and `document_embeddings`, which
becomes the fan-out graph of scaleout/embedding.py under the same key. Everything else (the other
assets, whatever the lead adds to the graph, the checks, pools, sensors and schedules) is taken from
`build_defs` as it is, so the two deployments cannot drift apart.
"""

import warnings
from typing import Any

import dagster as dg
from dagster_celery import celery_executor

from gitlab_knowledge.defs import build_defs
from gitlab_knowledge.defs.batch import BATCH_JOB, BATCH_OP, RETRY_TAG
from gitlab_knowledge.defs.jobs import EMBED_JOB, QUIET_LOGS, SYNC_JOB
from gitlab_knowledge.defs.resources import workspace_resource
from gitlab_knowledge.defs.run_slots import PROJECT_TAG
from gitlab_knowledge.scaleout.embedding import ASSET_KEY, document_embeddings
from gitlab_knowledge.workspace import Workspace

BROKER_ENV = "DAGSTER_CELERY_BROKER_URL"
BACKEND_ENV = "DAGSTER_CELERY_BACKEND_URL"

distributed_executor = celery_executor.configured(
    {"broker": {"env": BROKER_ENV}, "backend": {"env": BACKEND_ENV}}, name="celery")


def fanout_config(chunk_documents: int) -> dict[str, Any]:
    """Run config that sets the fan-out's chunk size (documents per embedding step)."""
    return {"ops": {ASSET_KEY: {"ops": {"plan_embedding_chunks": {"config": {"chunk_documents": chunk_documents}}}}}}


def build_scaleout_defs(workspace: Any = workspace_resource) -> dg.Definitions:
    base = build_defs(workspace)
    key = dg.AssetKey(ASSET_KEY)
    assets = [a for a in base.assets or () if not (isinstance(a, dg.AssetsDefinition) and key in a.keys)]
    sync_job = dg.define_asset_job(SYNC_JOB, selection=dg.AssetSelection.all(), executor_def=distributed_executor,
                                   config=QUIET_LOGS,
                                   description="Sync one GitLab project through every layer, steps on Celery workers.")
    embed_job = dg.define_asset_job(EMBED_JOB, selection=dg.AssetSelection.assets(ASSET_KEY),
                                    executor_def=distributed_executor, config=QUIET_LOGS,
                                    description="(Re-)embed one project's documents, fanned out over the workers.")
    replaced = {SYNC_JOB: sync_job, EMBED_JOB: embed_job}
    jobs = [replaced.get(j.name, j) for j in base.jobs or ()]
    with warnings.catch_warnings():  # with_updated_job copies the sensor's beta `owners` parameter
        warnings.simplefilter("ignore", dg.BetaWarning)
        sensors = [per_project_sensor(s, sync_job) if BATCH_JOB in _job_names(s)
                   else s.with_updated_job(replaced[min(_job_names(s) & set(replaced))]) if _job_names(s) & set(replaced)
                   else s
                   for s in base.sensors or ()]
    schedules = [s.with_updated_job(replaced[s.job_name])
                 if isinstance(s, dg.ScheduleDefinition) and s.job_name in replaced else s for s in base.schedules or ()]
    return dg.Definitions(assets=[*assets, document_embeddings], asset_checks=base.asset_checks, jobs=jobs,
                          sensors=sensors, schedules=schedules, resources=base.resources,
                          executor=distributed_executor)


def _job_names(sensor: dg.SensorDefinition) -> set[str]:
    return {j.name for j in sensor.jobs} if sensor.has_jobs else set()


def per_project_sensor(base: dg.SensorDefinition, job: Any) -> dg.SensorDefinition:
    """A sensor asking for one distributed `sync_project` run per project where the
    single-machine deployment asks for one batch run (defs/batch.py: the change sensor's tick,
    discovery's new projects): a batch's projects execute in its own process, and here the steps
    belong on the workers. Its other requests (discovery's purge) pass through as they are."""
    others = [j for j in base.jobs if j.name != BATCH_JOB]
    targets = {"jobs": [job, *others]} if others else {"job": job}

    @dg.sensor(name=base.name, minimum_interval_seconds=base.minimum_interval_seconds,
               default_status=base.default_status, description=base.description, **targets)
    def sensor(context: dg.SensorEvaluationContext, workspace: dg.ResourceParam[Workspace]) -> dg.SensorResult:
        result = base(context)  # the same decision, from the same context (its workspace resource included)
        assert isinstance(result, dg.SensorResult)
        requests = []
        for request in result.run_requests or []:
            if others and request.job_name != BATCH_JOB:
                requests.append(request)
                continue
            config = request.run_config["ops"][BATCH_OP]["config"]
            for project in config["projects"]:
                tags = {**request.tags, PROJECT_TAG: project}
                if project in config.get("retry", {}):
                    tags[RETRY_TAG] = config["retry"][project]
                requests.append(dg.RunRequest(run_key=f"{request.run_key}|{project}", partition_key=project,
                                              tags=tags, job_name=job.name))
        return dg.SensorResult(run_requests=requests, skip_reason=result.skip_reason,
                               dynamic_partitions_requests=result.dynamic_partitions_requests, cursor=result.cursor)

    return sensor


defs = build_scaleout_defs()
