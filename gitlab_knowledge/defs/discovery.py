"""Discovery: the configured groups listed at most every `sync.discovery_minutes`, their projects
made partitions, and the projects that left them purged by a run the UI shows.

`group_discovery_sensor` calls `sync.groups.discover`, the code path `sync` uses. A new project
becomes a partition here and is synced by a `sync_projects` run this same tick asks for (the change
sensor does not name a project a queued batch names): left to the change sensor's next tick, it
waited up to a whole interval more, plus that tick's probing of every project. A project that left
every configured group on positive evidence (a
complete listing without it, then its own GET: deleted, archived, moved out; sync/groups.py) is
purged by a `purge_removed_projects` run: the automation has no terminal to ask, so it answers as
`sync --yes` would, for those projects only. A project taken out of `projects` or matched by a new
`exclude` is a change of the configuration and stays `sync`'s question, as before.

Nothing is purged after a listing that failed or was not complete: the group keeps the projects of
its last complete listing, and the purge waits for a discovery in which every group was listed. The
purge run checks again against the store before it removes anything (`find_removed`).

The purge is four steps, each store's writer under its own pool, in the order `purge.purge` keeps:
vectors, lexical index, then DuckDB in one transaction (a crash in between leaves the project for
the next purge to find again). Its own work is ~2 s on a store of 200 projects
(`benchmarks/purge_bench.py`); launched while a batch run holds the pools, it waits for that
batch. Each step takes its pool's slot itself (`_pool_slot`), asking every second, instead of
leaving the wait to Dagster's pool queue: that re-checks a waiting step on a growing backoff (1 s,
then 1.1x each time, up to 15 s), so a purge behind a batch of a minute started seconds after the
batch let go, and the runs behind it waited for it meanwhile; and its wait is a busy loop that
no Terminate reaches, where this one can be stopped and gives up after `PURGE_WAIT_S` (the next
discovery asks again).
"""

import contextlib
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import dagster as dg

from gitlab_knowledge.defs.batch import batch_run_config, projects_in_flight, sync_projects_job, tag_process
from gitlab_knowledge.defs.jobs import QUIET_LOGS
from gitlab_knowledge.defs.partitions import PARTITIONS_NAME, project_partitions
from gitlab_knowledge.defs.run_slots import PROJECT_TAG, TRIGGER_TAG, holding_pools
from gitlab_knowledge.defs.sensors import REAPER_INTERVAL_SECONDS, SENSOR_STATUS
from gitlab_knowledge.errors import KnowledgeError, StoreBusyError, SyncInProgressError
from gitlab_knowledge.layers import DUCKDB_POOL, LANCEDB_POOL, TANTIVY_POOL
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

PURGE_JOB = "purge_removed_projects"
PURGE_WAIT_S = 900.0  # how long a purge step waits for its pool before the run fails (as a batch waits)
POOL_POLL_S = 1.0
DISCOVERY_TAG = "gitlab_knowledge/discovery"  # on a purge run: the discovery that found the projects gone


def due(cursor: str | None, workspace: Workspace, now: datetime) -> str | None:
    """Why a discovery is due now (None: not yet). Due when the groups or their options changed
    since the last one, a group was never listed completely, the last one failed somewhere, or
    `discovery_minutes` have passed."""
    from gitlab_knowledge.store import groups

    config = workspace.config
    last = json.loads(cursor) if cursor else {}
    if last.get("settings") != settings(workspace):
        return "the configured groups changed" if last else "first discovery"
    if groups.unlisted(config):
        return f"group {groups.unlisted(config)[0]} has no complete listing"
    if not last.get("complete", False):
        return "the last discovery did not list every group"
    at = datetime.fromisoformat(last["at"])
    if now - at >= timedelta(minutes=config.sync.discovery_minutes):
        return f"{config.sync.discovery_minutes:g} minutes since the last discovery"
    return None


def settings(workspace: Workspace) -> str:
    from gitlab_knowledge.store.groups import options

    g = workspace.config.groups
    return json.dumps([list(g.paths), options(g), list(g.exclude)])


def _purge_request(workspace: Workspace, discovered_at: str) -> dg.RunRequest | None:
    """A purge run for the stored projects that left the groups, when the store still holds any."""
    from gitlab_knowledge.store import groups

    left = groups.left(workspace.config)
    if not left:
        return None
    found = _removed(workspace, set(left))
    if not found:
        return None
    ids = sorted(p.project_id for p in found)
    return dg.RunRequest(
        job_name=PURGE_JOB, run_key=f"purge|{','.join(map(str, ids))}|{discovered_at}",
        run_config={"ops": {"find_removed": {"config": {"project_ids": ids}}}, **QUIET_LOGS},
        tags={TRIGGER_TAG: "discovery", DISCOVERY_TAG: discovered_at})


def _sync_request(context: dg.SensorEvaluationContext, new: list[str], discovered_at: str) -> dg.RunRequest | None:
    """One batch run for the projects this discovery made partitions, unless a batch queued or
    running already names them all."""
    from gitlab_knowledge.backlog import digest

    wanted = [p for p in new if p not in projects_in_flight(context.instance, new)]
    if not wanted:
        return None
    return dg.RunRequest(job_name=sync_projects_job.name, run_key=f"discovered|{digest(wanted)}|{discovered_at}",
                         run_config=batch_run_config(wanted),
                         tags={TRIGGER_TAG: "discovery", DISCOVERY_TAG: discovered_at,
                               PROJECT_TAG: ", ".join(wanted) if len(wanted) <= 5 else f"{len(wanted)} new projects"})


def _removed(workspace: Workspace, wanted: set[int]) -> list[Any]:
    """Of `wanted`, the stored projects the configuration no longer names (purge.removed_projects,
    `sync`'s own rule): none while a configured group was never listed or a configured path never
    resolved."""
    from gitlab_knowledge import purge
    from gitlab_knowledge.store import groups

    config = workspace.config
    if groups.unlisted(config) or not config.duckdb_path.exists():
        return []
    try:
        with workspace.read() as con:
            found = purge.removed_projects(con, list(config.projects),
                                           keep_ids=[m.project_id for m in groups.members(config)])
    except purge.Unresolved:
        return []
    return [p for p in found if p.project_id in wanted]


class PurgeConfig(dg.Config):
    project_ids: list[int] = []  # the projects the discovery found gone (none: the run purges nothing)


@dg.op(required_resource_keys={"workspace"}, description="The requested projects the store still holds and the "
       "configuration (projects and groups' last complete listings) no longer names.")
def find_removed(context: dg.OpExecutionContext, config: PurgeConfig) -> list[Any]:
    found = _removed(context.resources.workspace, set(config.project_ids))
    for project in found:
        context.log.info(f"purging {project.path} (id {project.project_id}, {project.documents} documents)")
    return found


@contextlib.contextmanager
def _pool_slot(context: dg.OpExecutionContext, pool: str) -> Iterator[None]:
    """Hold `pool`'s slot for this step (the one-writer rule every run keeps), asking again every
    `POOL_POLL_S` while another run holds it; `SyncInProgressError` after `PURGE_WAIT_S`."""
    deadline = time.monotonic() + PURGE_WAIT_S
    said = False
    while True:
        slot = holding_pools(context.instance, context.run_id, str(context.op_handle), [pool])
        try:
            slot.__enter__()
            break
        except SyncInProgressError:
            if time.monotonic() >= deadline:
                raise SyncInProgressError(f"another run held the {pool} pool for {PURGE_WAIT_S:.0f}s: nothing more "
                                          "purged; the next discovery asks again") from None
            if not said:
                context.log.info(f"waiting for the {pool} pool (another run writes that store)")
                said = True
            time.sleep(POOL_POLL_S)
    try:
        yield
    finally:
        slot.__exit__(None, None, None)


@dg.op(required_resource_keys={"workspace"})
def purge_vectors(context: dg.OpExecutionContext, removed: list[Any]) -> list[Any]:
    from gitlab_knowledge import purge

    if not removed:
        return removed
    tag_process(context)  # the reaper frees the slots of a run whose process died
    with _pool_slot(context, LANCEDB_POOL):
        for project in removed:
            purge.purge_vectors(context.resources.workspace, project)
    return removed


@dg.op(required_resource_keys={"workspace"})
def purge_lexical(context: dg.OpExecutionContext, removed: list[Any]) -> list[Any]:
    from gitlab_knowledge import purge

    if not removed:
        return removed
    with _pool_slot(context, TANTIVY_POOL):
        for project in removed:
            purge.purge_lexical(context.resources.workspace, project)
    return removed


@dg.op(required_resource_keys={"workspace"})
def purge_store(context: dg.OpExecutionContext, removed: list[Any]) -> dg.Output[int]:
    """DuckDB last; then the project's partition goes (its runs stay in the history)."""
    from gitlab_knowledge import purge
    from gitlab_knowledge.store import groups

    workspace = context.resources.workspace
    keep = {p.casefold() for p in groups.project_paths(workspace.config)}
    partitions = context.instance.get_dynamic_partitions(PARTITIONS_NAME)
    if removed:
        with _pool_slot(context, DUCKDB_POOL):
            for project in removed:
                purge.purge_store(workspace, project)
    for project in removed:
        for key in partitions:
            if key.casefold() == project.path.casefold() and key.casefold() not in keep:
                context.instance.delete_dynamic_partition(PARTITIONS_NAME, key)
    groups.forget_left(workspace.config.data_dir, [p.project_id for p in removed])
    return dg.Output(len(removed), metadata={
        "purged": dg.MetadataValue.md("\n".join(f"- {p.path} (id {p.project_id}, {p.documents} documents)"
                                                for p in removed) or "nothing")})


@dg.job(name=PURGE_JOB, executor_def=dg.in_process_executor, config=QUIET_LOGS,
        description="Removes projects that left every configured group (deleted, archived, moved out) from the "
                    "vector tables, the lexical index and DuckDB; launched by group_discovery_sensor.")
def purge_removed_projects_job() -> None:
    purge_store(purge_lexical(purge_vectors(find_removed())))


@dg.sensor(
    name="group_discovery_sensor",
    jobs=[sync_projects_job, purge_removed_projects_job],
    minimum_interval_seconds=REAPER_INTERVAL_SECONDS,
    default_status=SENSOR_STATUS,
    description="Lists the configured groups at most every sync.discovery_minutes (and at once when the groups "
                "change): new projects become partitions, synced by a sync_projects run of the same tick; projects that left every "
                "group (deleted, archived, moved out; shown by a complete listing and their own GET) are purged by "
                "a purge_removed_projects run. A failed or partial listing changes and purges nothing.",
)
def group_discovery_sensor(context: dg.SensorEvaluationContext,
                           workspace: dg.ResourceParam[Workspace]) -> dg.SensorResult:
    from gitlab_knowledge.store import groups
    from gitlab_knowledge.sync.groups import discover

    config = workspace.config
    if not config.groups.paths:
        return dg.SensorResult(skip_reason="no groups configured")
    now = utcnow()
    reason = due(context.cursor, workspace, now)
    if reason is None:
        return dg.SensorResult(skip_reason=f"the groups were listed less than {config.sync.discovery_minutes:g} "
                                           "minutes ago")
    try:
        discovery = discover(workspace)
    except KnowledgeError as exc:  # the token rejected, the record unwritable: next tick again
        raise dg.DagsterError(f"discovery failed: {exc}") from None
    context.log.info(f"discovery ({reason}): " + "; ".join(
        f"{g.configured}: {len(g.projects)} listed" if g.complete else f"{g.configured}: {g.error}"
        for g in discovery.listings))
    for gone in discovery.left:
        context.log.info(f"{gone['path']} left the configured groups ({gone['why']})")
    at = now.isoformat()
    existing = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    paths = groups.project_paths(config)
    new = [p for p in paths if p not in existing]
    requests, busy = [], None
    sync = _sync_request(context, new, at) if new else None
    if sync is not None:  # first: the new projects' first sync is short, the purge can wait for it
        requests.append(sync)
    if discovery.complete:
        try:
            purge = _purge_request(workspace, at)
        except StoreBusyError as exc:  # which stored projects left is asked again on the next tick
            purge, busy = None, f"; store busy, the purge waits for the next tick: {exc}"
        if purge is not None:
            requests.append(purge)
    cursor = json.dumps({"at": at, "settings": settings(workspace), "complete": discovery.complete and not busy})
    skip = None if requests else (
        f"listed {len(discovery.listings)} group(s): {len(paths)} project(s), {len(new)} new partition(s)"
        + ("" if discovery.complete else f"; {discovery.errors[0]}: nothing purged") + (busy or ""))
    return dg.SensorResult(run_requests=requests, cursor=cursor, skip_reason=skip,
                           dynamic_partitions_requests=[project_partitions.build_add_request(new)] if new else [])
