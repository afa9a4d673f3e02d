"""Discovery in the automation (defs/discovery.py) against the sandbox: the groups' projects become
partitions without a change to the config and a batch run the same tick asks for syncs a new one
(unless a queued batch names it already); a project that
is archived, deleted or moved out is purged by a purge_removed_projects run only after a complete
listing, never after a failed one; discovery waits `discovery_minutes` between listings."""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import tomli_w

from gitlab_knowledge.defs import build_defs, defs
from gitlab_knowledge.defs.batch import BATCH_JOB, BATCH_OP
from gitlab_knowledge.defs.discovery import PURGE_JOB
from gitlab_knowledge.defs.runner import run_sync
from gitlab_knowledge.store import groups as record_store
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.helpers import SYNC_LAYERS, scalar


@pytest.fixture(scope="module")
def grouped_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grouped")
    generate_dataset(out, projects=3, issues=6, mrs=0, seed=9, threads_per_parent_mean=0.5, group_depth=1,
                     group_fanout=2)
    return out


@pytest.fixture
def env(grouped_dataset, tmp_path, token_env):
    with SandboxGitLab(dataset=grouped_dataset) as sb, dg.instance_for_test() as instance:
        path = tmp_path / "gitlab_knowledge.toml"
        path.write_text(tomli_w.dumps({
            "groups": ["acme"], "gitlab": {"url": sb.url, "rate_limit": 0, "max_retries": 1, "timeout": 5},
            "storage": {"data_dir": str(tmp_path / "data")}}), encoding="utf-8")
        yield sb, str(path), instance


def discovery_tick(instance: dg.DagsterInstance, path: str, cursor: str | None = None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def("group_discovery_sensor")
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"workspace": Workspace.load(path)}) as context:
        return sensor(context)


def change_tick(instance: dg.DagsterInstance, path: str) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def("gitlab_change_sensor")
    with dg.build_sensor_context(instance=instance, resources={"workspace": Workspace.load(path)}) as context:
        return sensor(context)


def aged(result: dg.SensorResult, minutes: float = 61) -> str:
    """The tick's cursor as if it had been written `minutes` ago."""
    cursor = json.loads(result.cursor)
    cursor["at"] = (utcnow() - timedelta(minutes=minutes)).isoformat()
    return json.dumps(cursor)


def add_partitions(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))



def batch_projects(requests: list[dg.RunRequest]) -> list[str]:
    """The projects a tick's one batch run syncs (defs/batch.py; [] when it asks for none)."""
    assert len(requests) <= 1
    return [p for r in requests for p in r.run_config["ops"][BATCH_OP]["config"]["projects"]]

def test_discovery_makes_partitions_syncs_new_projects_and_purges_only_on_a_complete_listing(env) -> None:
    sb, path, instance = env
    members = sorted(p["path_with_namespace"] for p in sb.state.group_projects("acme", include_subgroups=True))
    first = discovery_tick(instance, path)
    assert sorted(first.dynamic_partitions_requests[0].partition_keys) == members
    # Every member is new: the same tick asks for one batch run of them (the first sync).
    assert sorted(batch_projects(first.run_requests)) == members
    assert first.run_requests[0].tags["gitlab_knowledge/trigger"] == "discovery"
    add_partitions(instance, first)
    assert "less than 60 minutes" in discovery_tick(instance, path, first.cursor).skip_reason.skip_message
    # The change sensor probes the groups' projects like configured ones: all never synced.
    assert sorted(batch_projects(change_tick(instance, path).run_requests)) == members
    workspace = Workspace.load(path)
    archived, kept = members[0], members[1]
    assert all(o.success for o in run_sync(workspace, [archived, kept], instance=instance, selection=SYNC_LAYERS))

    archived_id = sb.state.project(archived).data["id"]
    assert scalar(workspace.config, "SELECT count(*) FROM issues WHERE project_id = ?", [archived_id]) > 0
    sb.state.archive_project(archived)
    added = sb.state.add_project("acme/new-team", "fresh")["path_with_namespace"]
    sb.state.create(added, "issues", {"title": "The first issue of a project nobody configured"})

    # GitLab fails the listing: nothing changes, nothing is purged, and the next tick tries again.
    sb.set_faults("503:path=/groups/")
    failed = discovery_tick(instance, path, aged(first))
    assert failed.run_requests == [] and not failed.dynamic_partitions_requests
    assert "nothing purged" in failed.skip_reason.skip_message and not json.loads(failed.cursor)["complete"]
    assert record_store.left(workspace.config) == {}
    sb.set_faults(None)

    found = discovery_tick(instance, path, failed.cursor)  # due at once: the last one did not list everything
    assert found.dynamic_partitions_requests[0].partition_keys == [added]
    # The new project is synced by a run of this tick, not at the change sensor's next one; the purge after it.
    sync, purge = found.run_requests
    assert sync.job_name == BATCH_JOB and batch_projects([sync]) == [added]
    assert purge.job_name == PURGE_JOB and purge.run_config["ops"]["find_removed"]["config"] == {
        "project_ids": [archived_id]}
    add_partitions(instance, found)
    due = batch_projects(change_tick(instance, path).run_requests)
    assert added in due and archived not in due  # the new project syncs, the gone one no more
    [synced] = run_sync(workspace, [added], instance=instance, selection=SYNC_LAYERS)
    assert synced.success and scalar(workspace.config, "SELECT title FROM issues WHERE project_id = ?",
                                     [sb.state.project(added).data["id"]]) == \
        "The first issue of a project nobody configured"

    job = build_defs(workspace).resolve_job_def(PURGE_JOB)
    result = job.execute_in_process(run_config=purge.run_config, instance=instance, tags=purge.tags)
    assert result.success
    assert scalar(workspace.config, "SELECT count(*) FROM raw_payloads WHERE project_id = ?", [archived_id]) == 0
    kept_id = sb.state.project(kept).data["id"]
    assert scalar(workspace.config, "SELECT count(*) FROM issues WHERE project_id = ?", [kept_id]) > 0
    assert archived not in instance.get_dynamic_partitions("gitlab_projects")
    assert record_store.left(workspace.config) == {}
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags["gitlab_knowledge/trigger"] == "discovery"  # what the UI lists


def test_discovery_asks_no_second_sync_of_a_new_project_a_queued_batch_names(env) -> None:
    """The change sensor (or an earlier tick) created a batch naming the new project: discovery
    adds the partition but asks for no run of it; a new project nobody names yet gets one."""
    from dagster._core.test_utils import create_run_for_test

    from gitlab_knowledge.defs.batch import batch_run_config

    sb, path, instance = env
    first = discovery_tick(instance, path)
    add_partitions(instance, first)
    named = sb.state.add_project("acme/new-team", "queued")["path_with_namespace"]
    create_run_for_test(instance, job_name=BATCH_JOB, run_config=batch_run_config([named]),
                        status=dg.DagsterRunStatus.NOT_STARTED)
    found = discovery_tick(instance, path, aged(first))
    assert found.dynamic_partitions_requests[0].partition_keys == [named] and found.run_requests == []
    add_partitions(instance, found)
    other = sb.state.add_project("acme/new-team", "unnamed")["path_with_namespace"]
    again = discovery_tick(instance, path, aged(found))
    assert batch_projects(again.run_requests) == [other]


def test_a_purge_run_removes_nothing_the_groups_list_again(env) -> None:
    """Between the discovery and its purge run, the project came back (unarchived): the run finds
    it configured again and leaves it."""
    sb, path, instance = env
    first = discovery_tick(instance, path)
    add_partitions(instance, first)
    workspace = Workspace.load(path)
    project = record_store.project_paths(workspace.config)[0]
    pid = sb.state.project(project).data["id"]
    assert run_sync(workspace, [project], instance=instance, selection=SYNC_LAYERS)[0].success
    sb.state.archive_project(project)
    [purge] = discovery_tick(instance, path, aged(first)).run_requests
    sb.state.archive_project(project, False)
    discovery_tick(instance, path, aged(first, 120))
    result = build_defs(workspace).resolve_job_def(PURGE_JOB).execute_in_process(
        run_config=purge.run_config, instance=instance)
    assert result.success and result.output_for_node("purge_store") == 0
    assert scalar(workspace.config, "SELECT count(*) FROM raw_payloads WHERE project_id = ?", [pid]) > 0


@pytest.fixture
def purge_behind_a_holder(env):
    """A synced project archived, the discovery's purge request for it, an instance whose pools
    take one run each, and a holder of the three stores' slots (a batch run that took them first)."""
    from gitlab_knowledge.defs.run_slots import holding_pools
    from gitlab_knowledge.layers import DUCKDB_POOL, LANCEDB_POOL, TANTIVY_POOL

    sb, path, instance = env
    first = discovery_tick(instance, path)
    add_partitions(instance, first)
    workspace = Workspace.load(path)
    project = record_store.project_paths(workspace.config)[0]
    assert run_sync(workspace, [project], instance=instance, selection=SYNC_LAYERS)[0].success
    sb.state.archive_project(project)
    [purge] = discovery_tick(instance, path, aged(first)).run_requests
    pid = sb.state.project(project).data["id"]
    with dg.instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 1}}}) as pooled:
        holder = holding_pools(pooled, "a-batch-run", "sync_each_project", [DUCKDB_POOL, TANTIVY_POOL, LANCEDB_POOL])
        holder.__enter__()
        try:
            yield workspace, pid, purge, pooled, holder
        finally:
            holder.__exit__(None, None, None)


def _purge_in_thread(workspace: Workspace, purge: dg.RunRequest, instance: dg.DagsterInstance) -> tuple[Any, list[Any]]:
    import threading

    out: list[Any] = []
    job = build_defs(workspace).resolve_job_def(PURGE_JOB)
    thread = threading.Thread(target=lambda: out.append(job.execute_in_process(
        run_config=purge.run_config, instance=instance, raise_on_error=False)), daemon=True)
    thread.start()
    return thread, out


def _purge_log(instance: dg.DagsterInstance) -> str:
    runs = instance.get_runs(dg.RunsFilter(job_name=PURGE_JOB), limit=1)
    return "\n".join(e.user_message for e in instance.all_logs(runs[0].run_id)) if runs else ""


def test_a_purge_behind_a_run_holding_the_pools_says_so_waits_and_purges_once_they_are_free(
        purge_behind_a_holder) -> None:
    """The purge waits for its pools in a wait of its own that the run's log shows (not Dagster's
    pool queue, which re-checks on a backoff of up to 15 s), writes nothing meanwhile, and purges
    once the holder lets go."""
    workspace, pid, purge, pooled, holder = purge_behind_a_holder
    thread, out = _purge_in_thread(workspace, purge, pooled)
    # Until it says so, or its run ends: a purge that waited silently would give up (PURGE_WAIT_S)
    # and end without the line, and the assertion below names what it logged instead.
    while "waiting for the gitlab_knowledge_lancedb pool" not in _purge_log(pooled) and thread.is_alive():
        thread.join(0.2)
    assert thread.is_alive(), f"the purge run never said what it waits for:\n{_purge_log(pooled)}"
    assert scalar(workspace.config, "SELECT count(*) FROM raw_payloads WHERE project_id = ?", [pid]) > 0
    holder.__exit__(None, None, None)
    thread.join(120)
    assert not thread.is_alive() and out[0].success and out[0].output_for_node("purge_store") == 1
    assert scalar(workspace.config, "SELECT count(*) FROM raw_payloads WHERE project_id = ?", [pid]) == 0


def test_a_purge_gives_up_while_the_pools_stay_held_and_the_next_run_finishes_it(
        purge_behind_a_holder, monkeypatch) -> None:
    from gitlab_knowledge.defs import discovery

    workspace, pid, purge, pooled, holder = purge_behind_a_holder
    monkeypatch.setattr(discovery, "PURGE_WAIT_S", 0.0)
    thread, out = _purge_in_thread(workspace, purge, pooled)
    thread.join(120)
    assert not thread.is_alive(), "the purge run was still waiting in the pools' queue"
    [failure] = out[0].get_step_failure_events()
    assert not out[0].success and failure.step_key == "purge_vectors"
    assert "another run held the gitlab_knowledge_lancedb pool" in failure.event_specific_data.error.to_string()
    assert scalar(workspace.config, "SELECT count(*) FROM raw_payloads WHERE project_id = ?", [pid]) > 0
    holder.__exit__(None, None, None)
    again = build_defs(workspace).resolve_job_def(PURGE_JOB).execute_in_process(
        run_config=purge.run_config, instance=pooled)
    assert again.success and again.output_for_node("purge_store") == 1
    assert scalar(workspace.config, "SELECT count(*) FROM raw_payloads WHERE project_id = ?", [pid]) == 0


def test_without_groups_the_discovery_sensor_does_nothing(env, tmp_path) -> None:
    sb, _path, instance = env
    plain = tmp_path / "plain.toml"
    plain.write_text(tomli_w.dumps({"projects": ["acme/x"], "gitlab": {"url": sb.url},
                                    "storage": {"data_dir": str(tmp_path / "plain")}}), encoding="utf-8")
    assert discovery_tick(instance, str(plain)).skip_reason.skip_message == "no groups configured"


def test_the_weekly_reconciliation_covers_the_groups_members(env) -> None:
    from datetime import UTC, datetime

    sb, path, instance = env
    discovery_tick(instance, path)
    members = sorted(p["path_with_namespace"] for p in sb.state.group_projects("acme", include_subgroups=True))
    schedule = defs.resolve_schedule_def("weekly_full_reconciliation")
    with dg.build_schedule_context(instance=instance, resources={"workspace": Workspace.load(path)},
                                   scheduled_execution_time=datetime(2026, 11, 22, 3, tzinfo=UTC),
                                   repository_def=defs.get_repository_def()) as context:
        requests = schedule.evaluate_tick(context).run_requests
    assert sorted(batch_projects(requests)) == members
    assert sorted(instance.get_dynamic_partitions("gitlab_projects")) == members
