"""Raw layer: GitLab payloads fetched incrementally into DuckDB `raw_payloads`."""

import dagster as dg

from gitlab_knowledge.defs.assets.pools import DUCKDB_POOL
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.defs.reporting import progress_for
from gitlab_knowledge.defs.resources import KnowledgeSettings
from gitlab_knowledge.sync.engine import ProjectSync, SyncResult


class SyncRunConfig(dg.Config):
    full: bool = False
    force: bool = False


def sync_metadata(result: SyncResult) -> dict[str, object]:
    totals = result.totals()
    lines = [
        f"**{result.project}** ({result.mode} sync, run {result.sync_run_id}) in {result.duration_s:.1f}s, "
        f"{result.client.get('api_calls', 0)} API calls",
        "",
        "| resource | listed | fetched | new | updated | deleted | threads fetched | rechecked |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in result.resources.items():
        lines.append(f"| {name} | {r.listed} | {r.fetched} | {r.new} | {r.updated} | {r.deleted} | "
                     f"{r.discussion_fetches} | {r.rechecked} |")
    return {
        "summary": dg.MetadataValue.md("\n".join(lines)),
        "mode": result.mode,
        "sync_run_id": result.sync_run_id,
        "items_listed": totals["listed"],
        "items_fetched": totals["fetched"],
        "items_new": totals["new"],
        "items_updated": totals["updated"],
        "items_deleted": totals["deleted"],
        "threads_fetched": totals["discussion_fetches"],
        "threads_rechecked": totals["rechecked"],
        "threads_new": totals["threads_new"],
        "threads_updated": totals["threads_updated"],
        "threads_deleted": totals["threads_deleted"],
        "api_calls": result.client.get("api_calls", 0),
        "api_retries": result.client.get("retries", 0),
        "rate_limited_429": result.client.get("throttled", 0),
        "rate_limit_wait_s": round(result.client.get("throttle_wait_s", 0.0) + result.client.get("limiter_wait_s", 0.0), 3),
        "duration_s": round(result.duration_s, 3),
    }


@dg.asset(
    key="raw_gitlab_payloads",
    partitions_def=project_partitions,
    group_name="raw",
    kinds={"gitlab", "duckdb"},
    pool=DUCKDB_POOL,
    description=(
        "Issues, merge requests and their discussion threads as GitLab returned them, fetched "
        "incrementally (cursor on updated_at) into DuckDB raw_payloads. System-only threads are "
        "not kept. With `full: true` every item and thread is refetched and what GitLab no longer "
        "lists is tombstoned."
    ),
)
def raw_gitlab_payloads(context: dg.AssetExecutionContext, config: SyncRunConfig,
                        settings: KnowledgeSettings) -> dg.MaterializeResult:
    result = ProjectSync(settings.load(), context.partition_key, full=config.full, force=config.force,
                         dagster_run_id=context.run.run_id, progress=progress_for(context)).run()
    return dg.MaterializeResult(metadata=sync_metadata(result))
