"""Dagster's SQLite event log, writing a batch of events in one transaction.

Dagster's `ConsolidatedSqliteEventLogStorage` stores each event on its own: a new engine and
connection and an fsync'd commit for the event's row, then again for its asset index rows (the
asset key's latest materialization, tags) or its check execution row. A batch run (defs/batch.py)
records ~20 events per project (a materialization per layer, a result per check) and paid
~190 ms per project for them (100 projects: 19.0 s of a 120 s sync). Its `store_event_batch`,
which Dagster's base class runs as a loop of `store_event`, is here one connection and one
transaction for all of them: the rows written are those `store_event` writes, in the same order.

The instance hands a batch to `store_event_batch` only for events logged with batch metadata
while `DAGSTER_EVENT_BATCH_SIZE` is set (defs/event_batch.py does both); every other event is
stored as Dagster stores it. The database file, its schema and its readers are Dagster's own, so a
Dagster home written with the plain class opens with this one and back.

This module is light on purpose (Dagster only): the webserver and the daemon import it to open
the instance, and must not load the definitions.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as db
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    AssetEventTagsTable,
    AssetKeyTable,
)
from dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log import (
    ConsolidatedSqliteEventLogStorage,
)
from dagster._serdes import serialize_value


class BatchingSqliteEventLogStorage(ConsolidatedSqliteEventLogStorage):
    """`ConsolidatedSqliteEventLogStorage` whose `store_event_batch` is one transaction."""

    transactions = 0  # batches written in one transaction by this process (what the tests count)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not all(_batchable(event) for event in events):
            super().store_event_batch(events)  # kinds written here one by one, as Dagster does
            return
        with self._connect() as conn:  # one file holds the run and the index shard: one transaction
            index_cols = self._has_asset_key_index_cols_on_connection(conn)
            tags: list[dict[str, Any]] = []
            for event in events:
                event_id = conn.execute(self.prepare_insert_event(event)).inserted_primary_key[0]
                dagster_event = event.dagster_event
                if dagster_event is None:
                    continue
                if dagster_event.event_type in ASSET_EVENTS and dagster_event.asset_key:
                    tags.extend(self._tag_rows(event, event_id))
                    _store_asset_entry(conn, event, self._get_asset_entry_values(event, event_id, index_cols))
                elif dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                    _store_check_evaluation(conn, event, event_id)
            if tags and self.has_table(AssetEventTagsTable.name):
                conn.execute(AssetEventTagsTable.insert(), tags)
        type(self).transactions += 1

    def _tag_rows(self, event: EventLogEntry, event_id: int) -> list[dict[str, Any]]:
        key = event.get_dagster_event().asset_key
        assert key is not None
        return [dict(event_id=event_id, asset_key=key.to_string(), key=k, value=v,
                     event_timestamp=_timestamp(event))
                for k, v in self._tags_for_asset_event(event).items()]


def _batchable(event: EventLogEntry) -> bool:
    """Events whose rows this module writes as `store_event` does: log lines, asset events, and
    check results of a run, and other events (their row only). A planned check or a result outside
    a run goes the usual way."""
    dagster_event = event.dagster_event
    if dagster_event is None or dagster_event.event_type not in ASSET_CHECK_EVENTS:
        return True
    return dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION and bool(event.run_id)


def _timestamp(event: EventLogEntry) -> datetime:
    return datetime.fromtimestamp(event.timestamp, UTC).replace(tzinfo=None)


def _store_asset_entry(conn: Any, event: EventLogEntry, values: dict[str, Any]) -> None:
    """The asset key's row (its latest materialization), as `SqlEventLogStorage._store_asset_event`."""
    if not values:
        return
    key = event.get_dagster_event().asset_key
    assert key is not None
    updated = conn.execute(AssetKeyTable.update().values(**values)
                           .where(AssetKeyTable.c.asset_key == key.to_string())).rowcount
    if not updated:
        conn.execute(AssetKeyTable.insert().values(asset_key=key.to_string(), **values))


def _store_check_evaluation(conn: Any, event: EventLogEntry, event_id: int) -> None:
    """The check execution row of a run's check result, as
    `SqlEventLogStorage._update_asset_check_evaluation`: the row its planned event made, else a new one."""
    evaluation = event.get_dagster_event().asset_check_evaluation_data
    table = AssetCheckExecutionsTable
    values = dict(
        execution_status=(AssetCheckExecutionRecordStatus.SUCCEEDED.value if evaluation.passed
                          else AssetCheckExecutionRecordStatus.FAILED.value),
        evaluation_event=serialize_value(event),
        evaluation_event_timestamp=_timestamp(event),
        evaluation_event_storage_id=event_id,
        materialization_event_storage_id=(evaluation.target_materialization_data.storage_id
                                          if evaluation.target_materialization_data else None),
        partition=evaluation.partition,
    )
    partition = (table.c.partition == evaluation.partition if evaluation.partition is not None
                 else table.c.partition.is_(None))
    updated = conn.execute(table.update().where(db.and_(
        table.c.asset_key == evaluation.asset_key.to_string(), table.c.check_name == evaluation.check_name,
        table.c.run_id == event.run_id, partition)).values(**values)).rowcount
    if not updated:
        conn.execute(table.insert().values(asset_key=evaluation.asset_key.to_string(),
                                           check_name=evaluation.check_name, run_id=event.run_id, **values))
