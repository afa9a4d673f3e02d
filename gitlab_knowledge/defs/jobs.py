"""Jobs: the whole pipeline for one project partition.

In-process execution: the multiprocess executor costs ~2–2.5 s per step on these machines and the
steps are sequential anyway (each layer depends on the previous one, and the pools serialize the
writers), so a run is one process.
"""

import dagster as dg

from gitlab_knowledge.layers import EMBEDDINGS

SYNC_JOB = "sync_project"
EMBED_JOB = "embed_project"
# Runs the daemon launches echo their events on its terminal: INFO, not every DEBUG engine event.
# (Run config given at launch replaces this default; the CLI and the schedule set their own.)
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}

sync_project_job = dg.define_asset_job(
    SYNC_JOB,
    selection=dg.AssetSelection.all(),
    executor_def=dg.in_process_executor,
    config=QUIET_LOGS,
    description="Sync one GitLab project through every layer: raw → normalized (and the layers downstream).",
)

embed_project_job = dg.define_asset_job(
    EMBED_JOB,
    selection=dg.AssetSelection.assets(EMBEDDINGS.asset),
    executor_def=dg.in_process_executor,
    config=QUIET_LOGS,
    description="(Re-)embed one project's documents, e.g. `--all` after a model change or a second model's table.",
)
