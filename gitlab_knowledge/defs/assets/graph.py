"""Graph layer: links between issues and MRs, and the files each MR changed (DuckDB)."""

import dagster as dg

from gitlab_knowledge.defs.assets.normalized import normalized_gitlab
from gitlab_knowledge.defs.failures import said_plainly
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.layers import GRAPH
from gitlab_knowledge.workspace import Workspace


@dg.asset(
    key=GRAPH.asset,
    deps=[normalized_gitlab],
    partitions_def=project_partitions,
    group_name=GRAPH.group,
    kinds={"duckdb"},
    pool=GRAPH.pool,
    description=(
        "item_references: every link written in an issue or MR (Closes #12 in an MR description, #N, "
        "!N, group/project#N, GitLab URLs, and GitLab's system notes: mentioned in, closed via, marked "
        "as related), resolved to the synced projects or marked external; mentions: each @username "
        "written in an item's title, description or notes; mr_files: the paths each MR "
        "changed (renames, new and deleted files); path_touches: each MR's files and review notes by "
        "path, what file history reads. Rebuilt from the store alone, never from GitLab."
    ),
)
def knowledge_graph(context: dg.AssetExecutionContext, workspace: dg.ResourceParam[Workspace]) -> dg.MaterializeResult:
    with said_plainly(context, GRAPH, workspace):
        stats = GRAPH.refresh(workspace, context.partition_key, dagster_run_id=context.run.run_id)
    return dg.MaterializeResult(metadata=stats.to_metadata())
