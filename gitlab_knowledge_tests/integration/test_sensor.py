"""The change sensor against the sandbox: no change → no run; a change in one project → one run
naming that project; the same tick twice → the same run key; projects become partitions; a run in
flight is not doubled; a failed sync gets a new key; the weekly schedule asks for one full sync of
every project. (Every tick asks for at most one run, of the batch job: defs/batch.py.)"""

import shutil
from datetime import UTC, datetime

import dagster as dg
import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs import defs
from gitlab_knowledge.defs.batch import BATCH_OP, batch_run_config
from gitlab_knowledge.defs.partitions import ensure_partitions
from gitlab_knowledge.defs.runner import run_sync
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import write_config_file


@pytest.fixture
def env(sandbox, tmp_path, token_env):
    path = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, tmp_path / "data")
    with dg.instance_for_test() as instance:
        yield sandbox, load_config(path), str(path), instance


@pytest.fixture
def tiny_env(tiny_sandbox, tmp_path, token_env):
    """`env` on the tiny dataset: for a test that syncs, but not for the size of what it syncs."""
    path = write_config_file(tmp_path / "gitlab_knowledge.toml", tiny_sandbox, tmp_path / "data")
    with dg.instance_for_test() as instance:
        yield tiny_sandbox, load_config(path), str(path), instance


@pytest.fixture
def synced_env(sandbox, small_store, tmp_path, token_env):
    """`env` after a sync of every project: a copy of the session's synced small store (syncing
    and embedding it here again costs ~20 s of CPU a test), its projects already partitions."""
    shutil.copytree(small_store, tmp_path / "data")
    path = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, tmp_path / "data")
    with dg.instance_for_test() as instance:
        config = load_config(path)
        ensure_partitions(instance, list(config.projects))
        yield sandbox, config, str(path), instance


def tick(instance: dg.DagsterInstance, config_path: str) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def("gitlab_change_sensor")
    with dg.build_sensor_context(instance=instance,
                                 resources={"workspace": Workspace.load(config_path)}) as context:
        return sensor(context)


def projects(requests: list[dg.RunRequest]) -> list[str]:
    """The projects the tick's one run syncs ([] when it asks for none)."""
    assert len(requests) <= 1
    return [p for r in requests for p in r.run_config["ops"][BATCH_OP]["config"]["projects"]]


def test_never_synced_projects_become_partitions_and_runs(env):
    sb, config, path, instance = env
    result = tick(instance, path)
    assert projects(result.run_requests) == list(config.projects)
    assert result.run_requests[0].job_name in (None, "sync_projects") and not result.run_requests[0].partition_key
    assert result.dynamic_partitions_requests[0].partition_keys == list(config.projects)


def test_no_change_no_run_then_one_change_one_run(synced_env):
    sb, config, path, instance = synced_env
    sb.reset_stats()
    quiet = tick(instance, path)
    assert quiet.run_requests == [] and "no change" in quiet.skip_reason.skip_message
    assert sb.stats()["requests"] == 3 * len(config.projects)  # three probes a project, nothing else

    project = config.projects[1]
    issue = sb.state.list_items(project, "issues")[0]
    sb.clock.advance(3600)
    sb.state.add_note(project, "issues", issue["iid"], "a new note only the second project has")
    first = tick(instance, path)
    assert projects(first.run_requests) == [project]
    assert first.run_requests[0].tags["gitlab_knowledge/trigger"] == "sensor"
    again = tick(instance, path)  # a retried tick describes the same change: the same key
    assert [r.run_key for r in again.run_requests] == [r.run_key for r in first.run_requests]


def test_a_new_release_requests_a_run_for_its_project(synced_env):
    sb, config, path, instance = synced_env
    assert tick(instance, path).run_requests == []
    project = config.projects[0]
    sb.state.create_release(project, "v9.9.9", description="Shipped: a new thing")
    assert projects(tick(instance, path).run_requests) == [project]
    assert all(o.success for o in run_sync(Workspace.load(path), [project], instance=instance))
    assert tick(instance, path).run_requests == []  # stored at that version: settled


def test_a_run_in_flight_is_not_doubled_and_a_failure_gets_a_new_key(synced_env):
    sb, config, path, instance = synced_env
    project = config.projects[0]
    sb.clock.advance(3600)
    sb.state.create_issue(project, "something new")
    key = tick(instance, path).run_requests[0].run_key
    job = defs.resolve_job_def("sync_project")
    run = instance.create_run_for_job(job, tags={"dagster/partition": project}, status=dg.DagsterRunStatus.STARTED)
    assert tick(instance, path).run_requests == []  # that project's sync is already running
    instance.report_run_failed(run)
    retried = tick(instance, path).run_requests
    assert projects(retried) == [project] and retried[0].run_key != key
    batch = defs.resolve_job_def("sync_projects")
    queued = instance.create_run_for_job(batch, run_config=batch_run_config([project]),
                                         status=dg.DagsterRunStatus.NOT_STARTED)
    assert tick(instance, path).run_requests == []  # a batch run naming it is about to start
    instance.report_run_canceled(queued)
    again = tick(instance, path).run_requests  # that batch ended: the next one has a new key
    assert projects(again) == [project] and again[0].run_key != retried[0].run_key


def test_a_pending_throttle_recheck_requests_a_run(tiny_env):
    sb, config, path, instance = tiny_env
    project = config.projects[0]
    sb.clock.set(datetime(2026, 11, 1, 12, 0, tzinfo=UTC))
    issue = sb.state.list_items(project, "issues")[0]
    sb.state.update_issue(project, issue["iid"], description="touched now: its threads are fetched in the window")
    run_sync(Workspace.load(path), list(config.projects), instance=instance)
    requests = tick(instance, path).run_requests
    assert projects(requests) == [project]
    sb.clock.advance(120)
    run_sync(Workspace.load(path), [project], instance=instance)  # fetched after the window: settled
    assert tick(instance, path).run_requests == []


def test_an_unreachable_gitlab_fails_the_tick_with_one_line(env, tmp_path):
    sb, config, path, instance = env
    quick = write_config_file(tmp_path / "quick.toml", sb, tmp_path / "data", max_retries=1)
    sb.set_faults("503")
    with pytest.raises(Exception) as failure:
        tick(instance, str(quick))
    assert "503" in str(failure.value)


def test_weekly_schedule_requests_one_full_sync_of_every_project(env):
    sb, config, path, instance = env
    schedule = defs.resolve_schedule_def("weekly_full_reconciliation")
    with dg.build_schedule_context(instance=instance, resources={"workspace": Workspace.load(path)},
                                   scheduled_execution_time=datetime(2026, 11, 22, 3, tzinfo=UTC),
                                   repository_def=defs.get_repository_def()) as context:
        requests = schedule.evaluate_tick(context).run_requests
    assert projects(requests) == list(config.projects)
    assert requests[0].run_config["ops"][BATCH_OP]["config"]["full"]
    assert set(instance.get_dynamic_partitions("gitlab_projects")) == set(config.projects)
    assert [r.run_key for r in requests] == ["full|2026-11-22"]
