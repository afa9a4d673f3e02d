"""A run whose process died must give back every pool slot state it holds: a claimed slot, and a
step queued for a slot, also once a slot was *assigned* to it (a queued step of a dead run that
is assigned the slot keeps it from everyone for ever). And a run started while another live run
holds a pool is refused at once (exit 5) instead of waiting in the pool's queue."""

import os
import subprocess
import sys
import uuid

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from gitlab_knowledge.defs.run_slots import HOST_TAG, PID_TAG, PROCESS_START_TAG, TRIGGER_TAG, reap_dead_runs
from gitlab_knowledge.defs.runner import dagster_instance, run_sync
from gitlab_knowledge.errors import SyncInProgressError
from gitlab_knowledge.layers import DUCKDB_POOL
from gitlab_knowledge.sync.runs import HOSTNAME, process_start
from gitlab_knowledge.workspace import Workspace


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def cli_run(instance: dg.DagsterInstance, pid: int, project: str = "acme/other") -> str:
    run_id = str(uuid.uuid4())
    tags = {TRIGGER_TAG: "cli", PID_TAG: str(pid), HOST_TAG: HOSTNAME, "dagster/partition": project,
            PROCESS_START_TAG: process_start(pid) or ""}
    instance.add_run(DagsterRun(job_name="sync_project", run_id=run_id, status=DagsterRunStatus.STARTED, tags=tags))
    return run_id


@pytest.fixture
def instance(sandbox, make_config, tmp_path, monkeypatch) -> dg.DagsterInstance:
    monkeypatch.chdir(tmp_path)  # no dagster.yaml here: the instance lives under the data directory
    instance = dagster_instance(make_config(sandbox))
    assert instance.event_log_storage.supports_global_concurrency_limits
    # What Dagster's executor does before its first claim on a pool: the pool gets its default limit (1).
    instance.event_log_storage.initialize_concurrency_limit_to_default(DUCKDB_POOL)
    return instance


def test_a_dead_runs_queued_step_with_an_assigned_slot_is_freed(instance):
    storage = instance.event_log_storage
    alive = cli_run(instance, 1)  # PID 1 is always alive
    dead = cli_run(instance, dead_pid())
    assert storage.claim_concurrency_slot(DUCKDB_POOL, alive, "raw_gitlab_payloads").is_claimed
    assert not storage.claim_concurrency_slot(DUCKDB_POOL, dead, "raw_gitlab_payloads").is_claimed
    storage.free_concurrency_slots_for_run(alive)  # the live run finishes: the slot goes to the dead run's step
    [pending] = storage.get_concurrency_info(DUCKDB_POOL).pending_steps
    assert pending.run_id == dead and pending.assigned_timestamp is not None
    instance.report_run_failed(instance.get_run_by_id(alive), "done")

    assert reap_dead_runs(instance) == [dead]

    info = storage.get_concurrency_info(DUCKDB_POOL)
    assert info.pending_steps == [] and info.claimed_slots == []
    assert storage.claim_concurrency_slot(DUCKDB_POOL, str(uuid.uuid4()), "raw_gitlab_payloads").is_claimed


def test_a_sync_while_a_live_run_holds_the_pool_is_refused_at_once(instance, make_config, sandbox):
    live = cli_run(instance, 1)
    assert instance.event_log_storage.claim_concurrency_slot(DUCKDB_POOL, live, "normalized_gitlab").is_claimed
    config = make_config(sandbox)
    with pytest.raises(SyncInProgressError) as refused:  # at once: the pool below shows nothing queued
        run_sync(Workspace(config), [config.projects[0]], instance=instance)
    assert live in str(refused.value) and refused.value.exit_code == 5
    info = instance.event_log_storage.get_concurrency_info(DUCKDB_POOL)
    assert {s.run_id for s in info.pending_steps} == {s.run_id for s in info.claimed_slots} == {live}  # not queued


def test_a_reaper_tick_that_reaped_says_what_and_moves_its_cursor(instance):
    from gitlab_knowledge.defs import defs

    reaper = defs.resolve_sensor_def("dead_run_reaper")
    with dg.build_sensor_context(instance=instance) as context:
        quiet = reaper(context)
    assert quiet.skip_reason.skip_message == "no dead run" and not quiet.cursor
    dead = cli_run(instance, dead_pid())
    with dg.build_sensor_context(instance=instance, cursor="2 run(s) reaped, last at …") as context:
        result = reaper(context)
    # Dagster keeps a tick without a run SKIPPED: the reason and the cursor say what it did.
    assert f"reaped 1 dead run(s): {dead[:8]}" in result.skip_reason.skip_message
    assert result.cursor.startswith("3 run(s) reaped, last at ") and dead[:8] in result.cursor


def test_a_batch_run_whose_worker_died_is_reaped_and_its_projects_count_as_failed(instance):
    # A batch run (defs/batch.py) carries its projects in one step inside the daemon's run worker,
    # tagged with the worker's PID, holding the stores' pool slots: a dead worker's batch is
    # reaped, its slots freed, and the projects it named count as failed in the sensor's history
    # (it died before recording which of them it finished).
    from gitlab_knowledge.defs.batch import BATCH_OP, batch_run_config
    from gitlab_knowledge.defs.run_slots import holding_pools
    from gitlab_knowledge.defs.sensors import finished_batches, run_history

    def batch_run(pid: int, projects: list[str]) -> str:
        run_id = str(uuid.uuid4())
        tags = {TRIGGER_TAG: "sensor", PID_TAG: str(pid), HOST_TAG: HOSTNAME, PROCESS_START_TAG: process_start(pid) or ""}
        instance.add_run(DagsterRun(job_name="sync_projects", run_id=run_id, status=DagsterRunStatus.STARTED,
                                    tags=tags, run_config=batch_run_config(projects)))
        return run_id

    dead = batch_run(dead_pid(), ["acme/a", "acme/b"])
    held = holding_pools(instance, dead, BATCH_OP, [DUCKDB_POOL])
    held.__enter__()  # its process died holding the slot: nothing gives it back but the reaper
    assert [s.run_id for s in instance.event_log_storage.get_concurrency_info(DUCKDB_POOL).claimed_slots] == [dead]
    live = batch_run(os.getpid(), ["acme/c"])
    assert reap_dead_runs(instance) == [dead]
    assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(live).status == DagsterRunStatus.STARTED
    assert instance.event_log_storage.get_concurrency_info(DUCKDB_POOL).claimed_slots == []
    batches = finished_batches(instance)
    assert [run_history(instance, p, batches, []).failed for p in ("acme/a", "acme/b", "acme/c")] == [1, 1, 0]
