"""Normalized layer: projects, issues, MRs, labels, discussions, notes (DuckDB)."""

import dagster as dg

from gitlab_knowledge.defs.assets.raw import raw_gitlab_payloads
from gitlab_knowledge.defs.failures import said_plainly
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.layers import NORMALIZED
from gitlab_knowledge.store.queries import project_counts
from gitlab_knowledge.workspace import Workspace


@dg.asset(
    key=NORMALIZED.asset,
    deps=[raw_gitlab_payloads],
    partitions_def=project_partitions,
    group_name=NORMALIZED.group,
    kinds={"duckdb"},
    pool=NORMALIZED.pool,
    description=(
        "Raw payloads normalized into projects, issues, merge_requests, labels (+ junctions), "
        "discussions, notes and note_positions. System notes are excluded; a changed parent's "
        "threads are replaced in one transaction so deleted notes disappear. Rebuilt from the "
        "store alone, never from GitLab."
    ),
)
def normalized_gitlab(context: dg.AssetExecutionContext, workspace: dg.ResourceParam[Workspace]) -> dg.MaterializeResult:
    with said_plainly(context, NORMALIZED, workspace):
        stats = NORMALIZED.refresh(workspace, context.partition_key, dagster_run_id=context.run.run_id)
    counts = project_counts(workspace, context.partition_key)
    return dg.MaterializeResult(metadata={**stats.to_metadata(), **{f"count_{k}": v for k, v in counts.items()}})
