"""Raw layer: GitLab payloads fetched incrementally into DuckDB `raw_payloads`."""

import dagster as dg

from gitlab_knowledge.defs.failures import said_plainly
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.layers import RAW
from gitlab_knowledge.sync.stats import RawStats
from gitlab_knowledge.workspace import Workspace


class SyncRunConfig(dg.Config):
    full: bool = False
    force: bool = False


@dg.asset(
    key=RAW.asset,
    partitions_def=project_partitions,
    group_name=RAW.group,
    kinds={"gitlab", "duckdb"},
    pool=RAW.pool,
    description=(
        "Issues, merge requests and their discussion threads as GitLab returned them, fetched "
        "incrementally (cursor on updated_at) into DuckDB raw_payloads. System-only threads are "
        "not kept. With `full: true` every item and thread is refetched and what GitLab no longer "
        "lists is tombstoned."
    ),
)
def raw_gitlab_payloads(context: dg.AssetExecutionContext, config: SyncRunConfig,
                        workspace: dg.ResourceParam[Workspace]) -> dg.MaterializeResult:
    with said_plainly(context, RAW, workspace):
        result = RAW.refresh(workspace, context.partition_key, full=config.full, force=config.force,
                             dagster_run_id=context.run.run_id, progress=workspace.progress_for(context.log))
    stats = RawStats.of(result)
    return dg.MaterializeResult(metadata={"summary": dg.MetadataValue.md(stats.summary_markdown(result)),
                                          **stats.to_metadata()})
