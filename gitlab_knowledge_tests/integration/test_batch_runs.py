"""One run for many projects (defs/batch.py): the change sensor asks for one run however many
projects changed; that run carries every project through the layers in one step, recording
per-partition materializations and check results, with the index layers written once for all;
one project failing leaves the others committed while the batch's failure names it, and only that
project backs off."""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs import build_defs, checks, defs, event_batch
from gitlab_knowledge.defs.batch import BATCH_JOB, BATCH_OP, UNFINISHED_TAG, batch_run_config
from gitlab_knowledge.defs.checks import ALL_CHECKS
from gitlab_knowledge.defs.failures import FAILURE_TAG
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.defs.sensors import finished_batches, run_history
from gitlab_knowledge.layers import LAYERS
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import project_paths, write_config_file
from gitlab_knowledge_tests.helpers import scalar


@pytest.fixture(scope="module")
def five_projects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("five-projects")
    generate_dataset(out, projects=5, issues=5, mrs=2, seed=24, threads_per_parent_mean=1.0)
    return out


# The event log the product configures (gitlab_knowledge/event_log.py), whose batches of events
# are one transaction each: what the UI reads below is what it stored.
BATCHING_EVENT_LOG = {"module": "gitlab_knowledge.event_log", "class": "BatchingSqliteEventLogStorage"}


@pytest.fixture
def env(five_projects, tmp_path, token_env):
    overrides = {"event_log_storage": {**BATCHING_EVENT_LOG, "config": {"base_dir": str(tmp_path / "history")}}}
    with SandboxGitLab(dataset=five_projects) as sb, dg.instance_for_test(overrides=overrides) as instance:
        path = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data", max_retries=0)
        yield sb, str(path), instance


def test_five_changed_projects_are_one_run(env):
    sb, path, instance = env
    sensor = defs.resolve_sensor_def("gitlab_change_sensor")
    with dg.build_sensor_context(instance=instance, resources={"workspace": Workspace.load(path)}) as context:
        result = sensor(context)
    assert len(project_paths(sb)) == 5
    assert len(result.run_requests) == 1  # not 5
    assert result.run_requests[0].run_config["ops"][BATCH_OP]["config"]["projects"] == project_paths(sb)


def test_a_batch_run_materializes_each_partition_and_one_failure_spares_the_others(env, monkeypatch):
    sb, path, instance = env
    projects = project_paths(sb)
    broken = projects[2]
    # Every request about the third project fails (a 500 and no retry): the others are untouched.
    sb.set_faults(f"500:path=/projects/({broken.replace('/', '%2F')}|{scalar_id(sb, broken)})(/|$)")
    workspace = Workspace.load(path)
    writes = count_index_writes(monkeypatch)
    monkeypatch.setattr(checks, "TARGETS_PER_QUERY", 3)  # the 4 healthy projects' targets: two lookups per asset
    job = build_defs(workspace).resolve_job_def(BATCH_JOB)
    result = job.execute_in_process(run_config=batch_run_config(projects), instance=instance, raise_on_error=False,
                                    tags={"gitlab_knowledge/trigger": "sensor"})
    assert not result.success
    batch = instance.get_run_by_id(result.run_id)
    assert broken in batch.tags[FAILURE_TAG] and batch.tags[FAILURE_TAG].startswith("1 of 5 project(s) failed")
    assert json.loads(batch.tags[UNFINISHED_TAG]) == [broken]  # the per-project record the sensor reads
    # One run carries every project: no partition run per project, and the index layers write once
    # for all of them (a Tantivy commit, a LanceDB write and compaction), not once per project.
    assert instance.get_runs(dg.RunsFilter(job_name="sync_project")) == []
    assert writes == {"tantivy_commits": 1, "lance_writes": 1, "lance_optimize": 1}

    for layer in LAYERS:  # the UI shows the failed project's partitions failed, not merely missing
        status = instance.get_status_by_partition(dg.AssetKey(layer.asset), projects, project_partitions)
        assert status == {p: dg.AssetPartitionStatus.FAILED if p == broken else dg.AssetPartitionStatus.MATERIALIZED
                          for p in projects}
    for project in projects:
        for layer in LAYERS:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(layer.asset), asset_partitions=[project]), limit=1).records
            if project == broken:
                assert not records
            else:  # its own partition, with that layer's stats for that project
                assert [r.run_id for r in records] == [result.run_id]
                metadata = records[0].asset_materialization.metadata
                assert metadata, (project, layer.asset)
    evaluated = {(r.event_log_entry.dagster_event.event_specific_data.asset_check_key.name,
                  r.event_log_entry.dagster_event.event_specific_data.partition)
                 for r in instance.get_records_for_run(result.run_id,
                                                       of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records}
    partitioned = {spec.key.name for check in ALL_CHECKS for spec in check.check_specs if spec.partitions_def}
    assert len(partitioned) == 13  # every per-partition check (the 14th, freshness, is over all projects)
    assert evaluated == {(name, p) for name in partitioned for p in projects if p != broken}
    # The checks of every layer but the embeddings are recorded once the keyword index is done,
    # before the embeddings layer starts; the embeddings' own and layers_caught_up after it.
    events = sorted(instance.get_records_for_run(result.run_id, of_type={
        dg.DagsterEventType.ASSET_CHECK_EVALUATION, dg.DagsterEventType.ASSET_MATERIALIZATION}).records,
        key=lambda r: r.storage_id)
    embedded = [r.storage_id for r in events if r.event_log_entry.dagster_event.is_step_materialization
                and r.event_log_entry.dagster_event.asset_key == dg.AssetKey("document_embeddings")]
    assert len(embedded) == 4
    for r in events:
        data = r.event_log_entry.dagster_event.event_specific_data
        if r.event_log_entry.dagster_event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            late = data.asset_key == dg.AssetKey("document_embeddings") or data.check_name == "layers_caught_up"
            assert (r.storage_id > max(embedded)) if late else (r.storage_id < min(embedded)), data.check_name
    # A check's Partitions tab in the UI counts each healthy project's result (not "Missing").
    statuses = check_partition_statuses(instance)
    assert set(statuses) == partitioned
    for name, status in statuses.items():
        assert sorted(status["succeededPartitions"] + status["failedPartitions"]) == sorted(set(projects) - {broken}), name
        assert not status["inProgressPartitions"] and not status["executionFailedPartitions"], name
    synced = scalar(load_config(path), "SELECT list(DISTINCT path_with_namespace ORDER BY path_with_namespace) "
                                       "FROM projects")
    assert synced == sorted(set(projects) - {broken})  # the other four projects' layers all committed
    # The sensor's history: the failed project backs off, the others are clean.
    histories = {p: run_history(instance, p, finished_batches(instance), projects) for p in projects}
    assert histories[broken].failed == 1 and histories[broken].failed_at is not None
    assert all(h.failed == 0 for p, h in histories.items() if p != broken)


def test_a_batchs_event_writes_do_not_grow_with_its_projects(env, monkeypatch):
    """Each project's 19 events on its partitions (a materialization per layer, a result per
    check) are written in the batch's few transactions, not one by one: a batch of two projects
    and one of three make as many writes."""
    sb, path, instance = env
    projects = project_paths(sb)
    monkeypatch.setattr(event_batch, "HOLD_S", 3600.0)  # only the natural ends flush, whatever the machine's speed
    writes: dict[str, list[int]] = {}  # run -> events per write of partitions' events (a transaction each)
    others: dict[str, list[str]] = {}  # run -> the run's other Dagster events (run, step, output)
    storage = type(instance.event_log_storage)
    store_event, store_event_batch = storage.store_event, storage.store_event_batch

    def counting_batch(self, events):
        writes.setdefault(events[0].run_id, []).append(len(events))
        return store_event_batch(self, events)

    def counting_event(self, event):
        if event.dagster_event_type in PARTITION_EVENTS:
            writes.setdefault(event.run_id, []).append(1)
        elif event.dagster_event_type is not None:
            others.setdefault(event.run_id, []).append(event.dagster_event_type)
        return store_event(self, event)

    monkeypatch.setattr(storage, "store_event", counting_event)
    monkeypatch.setattr(storage, "store_event_batch", counting_batch)
    job = build_defs(Workspace.load(path)).resolve_job_def(BATCH_JOB)
    runs = [job.execute_in_process(run_config=batch_run_config(some), instance=instance).run_id
            for some in (projects[:2], projects[2:])]
    assert [sum(writes[run]) for run in runs] == [19 * 2, 19 * 3]
    # 5 writes however many projects: the DuckDB layers of every project, the lexical layer, the
    # check results of those layers (a first sync: its embeddings layer is long), the embeddings
    # layer, its check results and layers_caught_up (the old code wrote each event on its own).
    assert [len(writes[run]) for run in runs] == [5, 5], writes
    # A batch of synced projects (a tick: a few documents to embed) evaluates its checks once, after
    # its embeddings layer: one write fewer.
    again = job.execute_in_process(run_config=batch_run_config(projects), instance=instance).run_id
    assert (sum(writes[again]), len(writes[again])) == (19 * 5, 4), writes[again]
    assert others[runs[0]] == others[runs[1]]


PARTITION_EVENTS = {dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION}


CHECK_STATUSES = """
query ($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks {
          checks {
            name
            partitionStatuses {
              ... on AssetCheckDefaultPartitionStatuses {
                succeededPartitions failedPartitions inProgressPartitions skippedPartitions executionFailedPartitions
              }
            }
          }
        }
      }
    }
  }
}
"""


def check_partition_statuses(instance: dg.DagsterInstance) -> dict[str, dict[str, list[str]]]:
    """Each partitioned check's per-partition statuses as the UI's check Partitions tab reads them:
    the webserver's GraphQL (the `AssetCheckLiveFragment` fields), in process over these definitions."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(module_name="gitlab_knowledge.defs", attribute="defs"))
    out: dict[str, dict[str, list[str]]] = {}
    with (WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as process,
          process.create_request_context() as context):  # as the webserver enters it per request
        for layer in LAYERS:
            result = execute_dagster_graphql(context, CHECK_STATUSES, {"key": {"path": [layer.asset]}})
            for check in result.data["assetNodeOrError"]["assetChecksOrError"]["checks"]:
                if check["partitionStatuses"] is not None:  # the check over every project has none
                    out[check["name"]] = check["partitionStatuses"]
    return out


def count_index_writes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the index layers' writes: Tantivy commits, LanceDB vector writes and compactions."""
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.lexical.index import LexicalIndex

    counts = {"tantivy_commits": 0, "lance_writes": 0, "lance_optimize": 0}

    def counting(cls: type, name: str, key: str) -> None:
        real = getattr(cls, name)

        def wrapper(*args, **kwargs):
            counts[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    counting(LexicalIndex, "writer", "tantivy_commits")
    counting(VectorStore, "replace_docs", "lance_writes")
    counting(VectorStore, "optimize", "lance_optimize")
    return counts


def scalar_id(sb: SandboxGitLab, project: str) -> int:
    return next(p["id"] for p in sb.state.list_projects() if p["path_with_namespace"] == project)


def test_a_batch_waits_for_a_live_run_of_its_project_where_the_cli_refuses():
    from gitlab_knowledge.defs.runner import wait_until_free
    from gitlab_knowledge.errors import SyncInProgressError

    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def("sync_project")
        other = instance.create_run_for_job(job, tags={"dagster/partition": "acme/a"}, status=dg.DagsterRunStatus.STARTED)
        with pytest.raises(SyncInProgressError, match="acme/a"):
            wait_until_free(instance, ["acme/a"], 0.0)  # the CLI: at once
        slept: list[float] = []

        def sleep(seconds: float) -> None:  # the other run finishes while the batch waits
            slept.append(seconds)
            instance.report_run_failed(other)

        wait_until_free(instance, ["acme/a"], 600.0, sleep=sleep)
        assert slept == [1.0]


def test_refusing_a_busy_project_asks_for_the_live_runs_once_however_many_projects(monkeypatch):
    # A 300-project sync asked for each project's live runs, twice (the CLI, then the batch's
    # step) before its first fetch: one query of the live runs answers for all of them.
    from gitlab_knowledge.defs.run_slots import refuse_if_busy
    from gitlab_knowledge.errors import SyncInProgressError

    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def("sync_project")
        for project, status in (("acme/c", dg.DagsterRunStatus.STARTED), ("acme/b", dg.DagsterRunStatus.SUCCESS),
                                ("acme/d", dg.DagsterRunStatus.STARTING)):
            instance.create_run_for_job(job, tags={"dagster/partition": project}, status=status)
        newer = instance.create_run_for_job(job, tags={"dagster/partition": "acme/d"}, status=dg.DagsterRunStatus.STARTED)
        asked: list[Any] = []
        get_runs = type(instance).get_runs
        monkeypatch.setattr(type(instance), "get_runs",
                            lambda self, *args, **kwargs: asked.append(args) or get_runs(self, *args, **kwargs))
        refuse_if_busy(instance, [f"acme/free-{i}" for i in range(50)] + ["acme/b"])
        assert len(asked) == 1
        with pytest.raises(SyncInProgressError, match=f"a run of acme/d is already in progress \\(Dagster run "
                                                      f"{newer.run_id}, started from Dagster"):
            refuse_if_busy(instance, ["acme/a", "acme/d", "acme/c"])  # the first busy one, its newest run


def test_the_distributed_deployments_sensor_asks_for_a_run_per_project(env):
    # Its steps belong on the Celery workers: a batch run would execute its projects in-process.
    from gitlab_knowledge.scaleout.definitions import build_scaleout_defs

    sb, path, instance = env
    sensor = build_scaleout_defs().resolve_sensor_def("gitlab_change_sensor")
    with dg.build_sensor_context(instance=instance, resources={"workspace": Workspace.load(path)}) as context:
        result = sensor(context)
    assert [r.partition_key for r in result.run_requests] == project_paths(sb)
    assert sensor.job_name == "sync_project"


def test_the_distributed_deployments_discovery_asks_for_a_run_per_new_project_and_keeps_its_purge(env):
    # Discovery asks for one batch run of its new projects and a purge run in the same tick; on the
    # workers the batch becomes a sync_project run per project (as the change sensor's does) and the
    # purge run passes through unchanged.
    from gitlab_knowledge.defs.batch import sync_projects_job
    from gitlab_knowledge.defs.discovery import PURGE_JOB, purge_removed_projects_job
    from gitlab_knowledge.scaleout.definitions import build_scaleout_defs, per_project_sensor

    sb, path, instance = env
    wrapped = build_scaleout_defs().resolve_sensor_def("group_discovery_sensor")
    assert {j.name for j in wrapped.jobs} == {"sync_project", PURGE_JOB}
    purge = dg.RunRequest(job_name=PURGE_JOB, run_key="purge|7|t", run_config={"ops": {"find_removed": {
        "config": {"project_ids": [7]}}}})
    batch = dg.RunRequest(job_name=BATCH_JOB, run_key="discovered|d|t", run_config=batch_run_config(["a/x", "a/y"]))

    @dg.sensor(name="group_discovery_sensor", jobs=[sync_projects_job, purge_removed_projects_job])
    def base(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return dg.SensorResult(run_requests=[batch, purge])

    sensor = per_project_sensor(base, build_scaleout_defs().resolve_job_def("sync_project"))
    with dg.build_sensor_context(instance=instance, resources={"workspace": Workspace.load(path)}) as context:
        result = sensor(context)
    assert [(r.job_name, r.partition_key, r.run_key) for r in result.run_requests] == [
        ("sync_project", "a/x", "discovered|d|t|a/x"), ("sync_project", "a/y", "discovered|d|t|a/y"),
        (PURGE_JOB, None, "purge|7|t")]
