"""Dagster's event log with a batch written in one transaction (gitlab_knowledge/event_log.py) and
the step side that sends it batches (defs/event_batch.py): the rows stored are those Dagster
stores one event at a time, and an instance written by the plain storage opens with it."""

import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import ANY

import dagster as dg
import pytest

from gitlab_knowledge.defs import event_batch
from gitlab_knowledge.defs.checks import aimed_at_latest
from gitlab_knowledge.defs.event_batch import EventBatch
from gitlab_knowledge.defs.runner import dagster_instance, instance_yaml
from gitlab_knowledge.event_log import BatchingSqliteEventLogStorage

PLAIN = "  module: dagster._core.storage.event_log\n  class: ConsolidatedSqliteEventLogStorage\n"
BATCHING = "  module: gitlab_knowledge.event_log\n  class: BatchingSqliteEventLogStorage\n"
PARTITIONS = [f"group/project-{i}" for i in range(7)]


def home(path: Path, *, plain: bool) -> dg.DagsterInstance:
    """A Dagster home as the product writes it; `plain`: as an earlier version wrote it."""
    path.mkdir(parents=True)
    text = instance_yaml(path)
    (path / "dagster.yaml").write_text(text.replace(BATCHING, PLAIN) if plain else text)
    return dg.DagsterInstance.from_config(str(path))


@dg.op
def record(context: dg.OpExecutionContext) -> None:
    """Each partition's materializations of two assets, then a result per check pointing at the
    partition's latest materialization: one at a time as before (`context.log_event`), or held
    and written in batches (`EventBatch`), as the run's tag says."""
    batched = context.run.tags["how"] == "batched"
    events = EventBatch(context)

    def log(event: Any) -> None:
        events.add(event) if batched else context.log_event(event)

    for partition in PARTITIONS:
        for asset in ("raw", "docs", "raw"):  # raw twice: the asset's latest row is the later one
            log(dg.AssetMaterialization(asset_key=asset, partition=partition, metadata={"rows": len(partition)}))
    events.flush()
    evaluations = [dg.AssetCheckEvaluation(asset_key=dg.AssetKey(asset), check_name=f"{asset}_ok", passed=i % 3 != 0,
                                           partition=p, metadata={"i": i},
                                           severity=dg.AssetCheckSeverity.WARN if i % 2 else dg.AssetCheckSeverity.ERROR)
                   for i, p in enumerate(PARTITIONS) for asset in ("raw", "docs")]
    for evaluation in aimed_at_latest(context.instance, evaluations):
        log(evaluation)
    events.flush()


@dg.job
def record_job() -> None:
    record()


QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def stored(path: Path, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of the run's asset events as the UI's queries read them, storage ids named by the
    event they point at (its type, asset, partition and rank) so two databases compare."""
    con = sqlite3.connect(path / "history" / "event_log.db")
    events = con.execute("SELECT id, dagster_event_type, asset_key, partition, step_key FROM event_logs "
                         "WHERE run_id = ? AND dagster_event_type IN ('ASSET_MATERIALIZATION', 'ASSET_CHECK_EVALUATION') "
                         "ORDER BY id", (run_id,)).fetchall()
    name = {row[0]: (*row[1:4], rank) for rank, row in enumerate(events)}
    out = {
        "events": [name[row[0]] for row in events],
        "asset_keys": sorted((key, name.get(_storage_id(last)), run) for key, last, run in con.execute(
            "SELECT asset_key, last_materialization, last_run_id FROM asset_keys")),
        "checks": sorted(con.execute(
            "SELECT asset_key, check_name, partition, execution_status, evaluation_event_storage_id, "
            "materialization_event_storage_id FROM asset_check_executions WHERE run_id = ?", (run_id,)).fetchall()),
    }
    out["checks"] = [(*row[:4], name[row[4]], name[row[5]]) for row in out["checks"]]
    con.close()
    return out


def _storage_id(serialized: str | None) -> int | None:
    from dagster._serdes import deserialize_value

    return deserialize_value(serialized).storage_id if serialized else None  # type: ignore[attr-defined]


def test_a_batch_of_events_stores_the_rows_one_at_a_time_stores(tmp_path: Path) -> None:
    plain = home(tmp_path / "plain", plain=True)
    one_by_one = record_job.execute_in_process(instance=plain, tags={"how": "one by one"}, run_config=QUIET)
    batching = home(tmp_path / "batching", plain=False)
    assert isinstance(batching.event_log_storage, BatchingSqliteEventLogStorage)
    before = BatchingSqliteEventLogStorage.transactions
    batched = record_job.execute_in_process(instance=batching, tags={"how": "batched"}, run_config=QUIET)
    # 3 materializations and 2 check results per partition, in 2 transactions (one per flush)
    assert BatchingSqliteEventLogStorage.transactions - before == 2

    expected = stored(tmp_path / "plain", one_by_one.run_id)
    # Another storage (Dagster's Postgres, a user's own) gets the held events one by one.
    held_on_plain = record_job.execute_in_process(instance=plain, tags={"how": "batched"}, run_config=QUIET)
    assert BatchingSqliteEventLogStorage.transactions - before == 2
    assert stored(tmp_path / "plain", held_on_plain.run_id) == {**expected, "asset_keys": ANY}
    got = stored(tmp_path / "batching", batched.run_id)
    assert len(got["events"]) == len(PARTITIONS) * 5 and len(got["checks"]) == len(PARTITIONS) * 2
    assert {k: v for k, v in got.items() if k != "asset_keys"} == {k: v for k, v in expected.items() if k != "asset_keys"}
    assert [row[:2] for row in got["asset_keys"]] == [row[:2] for row in expected["asset_keys"]]
    # What the UI reads through the instance agrees too: each partition's latest materialization
    # and metadata, and each check's latest result per partition, aimed at it.
    for asset in ("raw", "docs"):
        records = batching.fetch_materializations(dg.AssetKey(asset), limit=100).records
        assert {r.partition_key for r in records} == set(PARTITIONS)
        assert all(r.run_id == batched.run_id and r.asset_materialization.metadata["rows"].value > 0 for r in records)
        check = dg.AssetCheckKey(dg.AssetKey(asset), f"{asset}_ok")
        for i, partition in enumerate(PARTITIONS):
            history = batching.event_log_storage.get_asset_check_execution_history(
                check, limit=5, partition_filter=_partition(partition))
            assert len(history) == 1 and history[0].status.value == ("SUCCEEDED" if i % 3 else "FAILED")
            assert history[0].event.dagster_event.asset_check_evaluation_data.target_materialization_data


def test_check_results_aim_at_what_the_batch_just_wrote_without_reading_it_back(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch of 300 projects read its 1,800 materializations back (and deserialized them, ~1 s)
    # to aim its check results at them: the storage that wrote them knows what a target needs.
    batching = home(tmp_path / "batching", plain=False)
    record_job.execute_in_process(instance=batching, tags={"how": "batched"}, run_config=QUIET)
    evaluations = [dg.AssetCheckEvaluation(asset_key=dg.AssetKey(asset), check_name=f"{asset}_ok", passed=True,
                                           partition=p) for p in PARTITIONS for asset in ("raw", "docs")]
    elsewhere = dg.DagsterInstance.from_config(str(tmp_path / "batching"))  # another process: nothing written
    read_back = [e.target_materialization_data for e in aimed_at_latest(elsewhere, evaluations)]
    reads: list[Any] = []
    fetch = dg.DagsterInstance.fetch_materializations
    monkeypatch.setattr(dg.DagsterInstance, "fetch_materializations",
                        lambda self, *args, **kwargs: reads.append(args) or fetch(self, *args, **kwargs))
    known = [e.target_materialization_data for e in aimed_at_latest(batching, evaluations)]
    assert reads == []
    assert known == read_back and all(known)
    assert len({t.storage_id for t in known}) == len(PARTITIONS) * 2  # each partition's own latest
    # An id remembered for another event (SQLite reuses a deleted row's id) is read back instead.
    written = batching.event_log_storage.__dict__["_written"]
    written[known[0].storage_id] = (dg.AssetKey("elsewhere"), "p", "another-run", 0.0)
    assert [e.target_materialization_data for e in aimed_at_latest(batching, evaluations)] == read_back
    assert len(reads) == 1


def _partition(key: str) -> Any:
    from dagster._core.storage.event_log.base import PartitionKeyFilter

    return PartitionKeyFilter(key=key)


def test_a_batch_larger_than_a_transaction_is_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_batch, "EVENTS_PER_TRANSACTION", 4)
    instance = home(tmp_path / "home", plain=False)
    before = BatchingSqliteEventLogStorage.transactions
    result = record_job.execute_in_process(instance=instance, tags={"how": "batched"}, run_config=QUIET)
    # 21 materializations in 5 batches of 4 and the last one alone (which Dagster stores as a
    # single event), 14 check results in 4 batches
    assert BatchingSqliteEventLogStorage.transactions - before == 5 + 4
    assert len(stored(tmp_path / "home", result.run_id)["checks"]) == 14


def test_each_transaction_looks_up_the_check_rows_of_its_own_results_only(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Each transaction of check results looked for planned rows among every row of the run, which
    # grew with each transaction before it (a batch of 300 projects writes 11).
    monkeypatch.setattr(event_batch, "EVENTS_PER_TRANSACTION", 4)
    instance = home(tmp_path / "home", plain=False)
    looked_up: list[int] = []

    class Reading:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, statement: Any, *args: Any) -> Any:
            result = self._conn.execute(statement, *args)
            if getattr(statement, "is_select", False) and "asset_check_executions" in str(statement):
                rows = list(result)
                looked_up.append(len(rows))
                return rows
            return result

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    from gitlab_knowledge import event_log

    store = event_log._store_check_evaluations
    monkeypatch.setattr(event_log, "_store_check_evaluations",
                        lambda conn, *args: store(Reading(conn), *args))  # type: ignore[arg-type]
    result = record_job.execute_in_process(instance=instance, tags={"how": "batched"}, run_config=QUIET)
    assert len(looked_up) == 4  # 14 check results in transactions of 4
    assert sum(looked_up) == 0  # none written before for the same partitions (was 0 + 4 + 8 + 12)
    assert len(stored(tmp_path / "home", result.run_id)["checks"]) == 14


def test_an_instance_an_earlier_version_created_gets_the_batching_event_log_and_keeps_its_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository root, whose dagster.yaml would be used
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    earlier = home(tmp_path / "home", plain=True)
    run = record_job.execute_in_process(instance=earlier, tags={"how": "one by one"}, run_config=QUIET)
    earlier.dispose()

    config: Any = SimpleNamespace(dagster_home=tmp_path / "home")
    upgraded = dagster_instance(config)
    assert isinstance(upgraded.event_log_storage, BatchingSqliteEventLogStorage)
    assert BATCHING in (tmp_path / "home" / "dagster.yaml").read_text()
    assert len(upgraded.fetch_materializations(dg.AssetKey("raw"), limit=100).records) == 2 * len(PARTITIONS)
    again = record_job.execute_in_process(instance=upgraded, tags={"how": "batched"}, run_config=QUIET)
    assert {r.run_id for r in upgraded.fetch_materializations(dg.AssetKey("docs"), limit=100).records} == \
        {run.run_id, again.run_id}

    # A dagster.yaml the user wrote is theirs: left as it is.
    mine = tmp_path / "mine"
    mine.mkdir()
    text = "# my instance\n" + instance_yaml(mine).replace(BATCHING, PLAIN)
    (mine / "dagster.yaml").write_text(text)
    dagster_instance(SimpleNamespace(dagster_home=mine))  # type: ignore[arg-type]
    assert (mine / "dagster.yaml").read_text() == text


def _entry(run_id: str, event_type: Any, data: Any) -> Any:
    from dagster._core.events import DagsterEvent
    from dagster._core.events.log import EventLogEntry

    return EventLogEntry(error_info=None, level="debug", user_message="", run_id=run_id, timestamp=time.time(),
                         dagster_event=DagsterEvent(event_type.value, "job", event_specific_data=data))


def test_a_batch_updates_a_planned_check_row_and_keeps_a_checks_last_result(tmp_path: Path) -> None:
    """A check whose planned event made its row (a check step's) gets the batch's result in that
    row; a check with two results in one batch keeps the later; a key's row holds its latest
    materialization after a planned one, as event-by-event writing leaves them."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationPlanned
    from dagster._core.events import (
        AssetMaterializationPlannedData,
        DagsterEventType,
        StepMaterializationData,
    )

    def check(partition: str, passed: bool) -> Any:
        return _entry("run", DagsterEventType.ASSET_CHECK_EVALUATION, dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey("raw"), check_name="ok", passed=passed, partition=partition))

    planned = _entry("run", DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
                     AssetCheckEvaluationPlanned(asset_key=dg.AssetKey("raw"), check_name="ok"))
    batch = [_entry("run", DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
                    AssetMaterializationPlannedData(dg.AssetKey("raw"), partition="b")),
             _entry("run", DagsterEventType.ASSET_MATERIALIZATION,
                    StepMaterializationData(dg.AssetMaterialization("raw", partition="a"))),
             _entry("run", DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
                    AssetMaterializationPlannedData(dg.AssetKey("raw"), partition="c")),
             check("a", True), check("b", True), check("b", False),
             _entry("run", DagsterEventType.ASSET_CHECK_EVALUATION, dg.AssetCheckEvaluation(
                 asset_key=dg.AssetKey("raw"), check_name="ok", passed=False))]  # the planned row's
    rows = {}
    for name, plain in (("plain", True), ("batching", False)):
        storage = home(tmp_path / name, plain=plain).event_log_storage
        storage.store_event(planned)
        if plain:
            for event in batch:
                storage.store_event(event)
        else:
            storage.store_event_batch(batch)
        con = sqlite3.connect(tmp_path / name / "history" / "event_log.db")
        rows[name] = (
            sorted(con.execute("SELECT check_name, partition, execution_status, evaluation_event_storage_id "
                               "FROM asset_check_executions").fetchall(), key=str),
            con.execute("SELECT asset_key, last_run_id, last_materialization IS NOT NULL, "
                        "last_materialization_timestamp IS NOT NULL FROM asset_keys").fetchall(),
            [_storage_id(v) for (v,) in con.execute("SELECT last_materialization FROM asset_keys")])
        con.close()
    assert rows["batching"] == rows["plain"]
    assert [r[1:3] for r in rows["plain"][0]] == [("a", "SUCCEEDED"), ("b", "FAILED"), (None, "FAILED")]
