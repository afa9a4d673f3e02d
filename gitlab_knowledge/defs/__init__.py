"""The Dagster definitions: `dagster dev -w workspace.yaml` loads `defs` from here."""

from typing import Any

import dagster as dg

from gitlab_knowledge.defs.assets.documents import search_documents
from gitlab_knowledge.defs.assets.graph import knowledge_graph
from gitlab_knowledge.defs.assets.index import document_embeddings, lexical_index
from gitlab_knowledge.defs.assets.normalized import normalized_gitlab
from gitlab_knowledge.defs.assets.raw import raw_gitlab_payloads
from gitlab_knowledge.defs.batch import sync_projects_job
from gitlab_knowledge.defs.checks import ALL_CHECKS
from gitlab_knowledge.defs.discovery import group_discovery_sensor, purge_removed_projects_job
from gitlab_knowledge.defs.jobs import embed_project_job, sync_project_job
from gitlab_knowledge.defs.resources import WORKSPACE, workspace_resource
from gitlab_knowledge.defs.schedules import freshness_job, freshness_schedule, weekly_full_reconciliation
from gitlab_knowledge.defs.sensors import dead_run_reaper, gitlab_change_sensor


def build_defs(workspace: Any = workspace_resource) -> dg.Definitions:
    """The definitions with `workspace` as the workspace resource: the resource that reads the
    config file (what the daemon and the UI load), or a ready-made `Workspace` for a run started in
    this process. Dagster binds resources into assets when definitions are built, so a run that
    brings its own workspace resolves its job from definitions built with it."""
    return dg.Definitions(
        assets=[raw_gitlab_payloads, normalized_gitlab, knowledge_graph, search_documents, document_embeddings, lexical_index],
        asset_checks=ALL_CHECKS,
        jobs=[sync_project_job, sync_projects_job, embed_project_job, freshness_job, purge_removed_projects_job],
        sensors=[gitlab_change_sensor, dead_run_reaper, group_discovery_sensor],
        schedules=[weekly_full_reconciliation, freshness_schedule],
        resources={WORKSPACE: workspace},
        executor=dg.in_process_executor,
    )


defs = build_defs()
