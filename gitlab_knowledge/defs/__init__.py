"""The Dagster definitions: `dagster dev -w workspace.yaml` loads `defs` from here."""

import dagster as dg

from gitlab_knowledge.defs.assets.documents import search_documents
from gitlab_knowledge.defs.assets.index import document_embeddings, lexical_index
from gitlab_knowledge.defs.assets.normalized import normalized_gitlab
from gitlab_knowledge.defs.assets.raw import raw_gitlab_payloads
from gitlab_knowledge.defs.jobs import embed_project_job, sync_project_job
from gitlab_knowledge.defs.resources import KnowledgeSettings

defs = dg.Definitions(
    assets=[raw_gitlab_payloads, normalized_gitlab, search_documents, document_embeddings, lexical_index],
    jobs=[sync_project_job, embed_project_job],
    resources={"settings": KnowledgeSettings()},
    executor=dg.in_process_executor,
)
