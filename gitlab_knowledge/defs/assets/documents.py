"""Documents layer: one search document per issue, MR and discussion thread (DuckDB)."""

import dagster as dg

from gitlab_knowledge.defs.assets.graph import knowledge_graph
from gitlab_knowledge.defs.assets.normalized import normalized_gitlab
from gitlab_knowledge.defs.failures import said_plainly
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.layers import DOCUMENTS
from gitlab_knowledge.workspace import Workspace


@dg.asset(
    key=DOCUMENTS.asset,
    deps=[normalized_gitlab, knowledge_graph],
    partitions_def=project_partitions,
    group_name=DOCUMENTS.group,
    kinds={"duckdb"},
    pool=DOCUMENTS.pool,
    description=(
        "One document per issue, MR and discussion thread: a thread starts with a header naming its "
        "parent ([Issue #234: title] Discussion) then `@author (date):` notes. SHA-256 content hash "
        "(re-embed iff it changes), metadata hash, middle-out truncation past ~8,000 tokens, and "
        "provenance (raw payload ids, sync run, Dagster run)."
    ),
)
def search_documents(context: dg.AssetExecutionContext, workspace: dg.ResourceParam[Workspace]) -> dg.MaterializeResult:
    with said_plainly(context, DOCUMENTS, workspace):
        stats = DOCUMENTS.refresh(workspace, context.partition_key, dagster_run_id=context.run.run_id)
    if stats.truncated:
        context.log.warning(f"{stats.truncated} document(s) exceeded ~8,000 tokens and were cut from the middle")
    return dg.MaterializeResult(metadata=stats.to_metadata())
