"""The Dagster definitions: `dagster dev -w workspace.yaml` loads `defs` from here."""

import dagster as dg

from gitlab_knowledge.defs.assets.documents import search_documents
from gitlab_knowledge.defs.assets.index import document_embeddings, lexical_index
from gitlab_knowledge.defs.assets.normalized import normalized_gitlab
from gitlab_knowledge.defs.assets.raw import raw_gitlab_payloads
from gitlab_knowledge.defs.checks import ALL_CHECKS
from gitlab_knowledge.defs.jobs import embed_project_job, sync_project_job
from gitlab_knowledge.defs.resources import KnowledgeSettings
from gitlab_knowledge.defs.schedules import freshness_job, freshness_schedule, weekly_full_reconciliation
from gitlab_knowledge.defs.sensors import gitlab_change_sensor

defs = dg.Definitions(
    assets=[raw_gitlab_payloads, normalized_gitlab, search_documents, document_embeddings, lexical_index],
    asset_checks=ALL_CHECKS,
    jobs=[sync_project_job, embed_project_job, freshness_job],
    sensors=[gitlab_change_sensor],
    schedules=[weekly_full_reconciliation, freshness_schedule],
    resources={"settings": KnowledgeSettings()},
    executor=dg.in_process_executor,
)
