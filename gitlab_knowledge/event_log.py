"""Dagster's SQLite event log, writing a batch of events in one transaction.

Dagster's `ConsolidatedSqliteEventLogStorage` stores each event on its own: a new engine and
connection and an fsync'd commit for the event's row, then again for its asset index rows (the
asset key's latest materialization, tags) or its check execution row. A batch run (defs/batch.py)
records ~20 events per project (a materialization per layer, a result per check) and paid
~190 ms per project for them (100 projects: 19.0 s of a 120 s sync). Its `store_event_batch`,
which Dagster's base class runs as a loop of `store_event`, is here one connection and one
transaction for all of them, leaving the rows `store_event` would leave.

The instance hands a batch to `store_event_batch` only for events logged with batch metadata
while `DAGSTER_EVENT_BATCH_SIZE` is set (defs/event_batch.py does both); every other event is
stored as Dagster stores it. The database file, its schema and its readers are Dagster's own, so a
Dagster home written with the plain class opens with this one and back.

This module is light on purpose (Dagster only): the webserver and the daemon import it to open
the instance, and must not load the definitions.
"""

from collections.abc import Mapping, Sequence
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
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log import (
    ConsolidatedSqliteEventLogStorage,
)


class BatchingSqliteEventLogStorage(ConsolidatedSqliteEventLogStorage):
    """`ConsolidatedSqliteEventLogStorage` whose `store_event_batch` is one transaction."""

    transactions = 0  # batches written in one transaction by this process (what the tests count)
    REMEMBERED = 50_000  # materializations `written_materializations` answers for (the newest)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not events:
            return
        if not all(_batchable(event) for event in events):
            super().store_event_batch(events)  # kinds written here one by one, as Dagster does
            return
        # Each event serialized once, and each table written with one statement for the batch
        # where `store_event` runs one or two per event: the cost left is Dagster's serialization.
        rows = [self._event_to_row(event) for event in events]
        with self._connect() as conn:  # one file holds the run and the index shard: one transaction
            inserted = conn.execute(SqlEventLogStorageTable.insert().returning(SqlEventLogStorageTable.c.id,
                                                                               sort_by_parameter_order=True), rows)
            ids = [row[0] for row in inserted]
            self._store_asset_entries(conn, events, ids)
            _store_check_evaluations(conn, events, ids, rows)
        type(self).transactions += 1
        self._remember(events, ids)

    def _remember(self, events: Sequence[EventLogEntry], ids: list[int]) -> None:
        written = self.__dict__.setdefault("_written", {})
        for storage_id, event in zip(ids, events, strict=True):
            dagster_event = event.dagster_event
            if dagster_event is not None and dagster_event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                written[storage_id] = (dagster_event.asset_key, dagster_event.partition, event.run_id, event.timestamp)
        while len(written) > self.REMEMBERED:
            del written[next(iter(written))]

    def written_materializations(self, key: Any, latest: Mapping[str, int]) -> dict[str, tuple[str, float]]:
        """partition -> (run id, timestamp) of each materialization of asset `key` in `latest`
        (partition -> storage id) that this storage object wrote in a batch: what a check result's
        target needs of it, without reading back (and deserializing) the events just written
        (~0.5 ms each: 300 projects' layers took ~1 s of a batch's end). A storage id is taken only
        with its asset and partition: SQLite may give a deleted event's id to a later one."""
        written = self.__dict__.get("_written", {})
        out = {}
        for partition, storage_id in latest.items():
            known = written.get(storage_id)
            if known is not None and known[:2] == (key, partition):
                out[partition] = known[2:]
        return out

    def _store_asset_entries(self, conn: Any, events: Sequence[EventLogEntry], ids: list[int]) -> None:
        """The asset keys' rows and the events' indexed tags, as `store_event` leaves them: a key's
        row after events of several kinds holds, column by column, what the last event setting
        that column set (a materialization: the latest materialization, run and time; a
        planned materialization: run and time; an observation: time), so only each kind's last
        event per key is applied, in order, and each key written once."""
        last: dict[tuple[str, DagsterEventType], int] = {}
        tags: list[dict[str, Any]] = []
        for index, event in enumerate(events):
            dagster_event = event.dagster_event
            if dagster_event is None or dagster_event.event_type not in ASSET_EVENTS or not dagster_event.asset_key:
                continue
            key = dagster_event.asset_key.to_string()
            last[(key, dagster_event.event_type)] = index
            tags.extend(dict(event_id=ids[index], asset_key=key, key=k, value=v, event_timestamp=_timestamp(event))
                        for k, v in self._tags_for_asset_event(event).items())
        if not last:
            return
        index_cols = self._has_asset_key_index_cols_on_connection(conn)
        values: dict[str, dict[str, Any]] = {}
        for (key, _), index in sorted(last.items(), key=lambda item: item[1]):
            values.setdefault(key, {}).update(self._get_asset_entry_values(events[index], ids[index], index_cols))
        for key, columns in values.items():
            if columns and not conn.execute(AssetKeyTable.update().values(**columns)
                                            .where(AssetKeyTable.c.asset_key == key)).rowcount:
                conn.execute(AssetKeyTable.insert().values(asset_key=key, **columns))
        if tags and self.has_table(AssetEventTagsTable.name):
            conn.execute(AssetEventTagsTable.insert(), tags)


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


def _store_check_evaluations(conn: Any, events: Sequence[EventLogEntry], ids: list[int],
                             rows: list[dict[str, Any]]) -> None:
    """The check execution rows of a run's check results, as
    `SqlEventLogStorage._update_asset_check_evaluation` leaves them: the row a planned event made
    for (check, run, partition), else a new one, holding the last result for it."""
    table = AssetCheckExecutionsTable
    results: dict[tuple[str, str, str, str | None], dict[str, Any]] = {}
    for index, event in enumerate(events):
        dagster_event = event.dagster_event
        if dagster_event is None or dagster_event.event_type != DagsterEventType.ASSET_CHECK_EVALUATION:
            continue
        evaluation = dagster_event.asset_check_evaluation_data
        target = evaluation.target_materialization_data
        results[(evaluation.asset_key.to_string(), evaluation.check_name, event.run_id, evaluation.partition)] = dict(
            execution_status=(AssetCheckExecutionRecordStatus.SUCCEEDED.value if evaluation.passed
                              else AssetCheckExecutionRecordStatus.FAILED.value),
            evaluation_event=rows[index]["event"],  # the event's own serialization, as stored above
            evaluation_event_timestamp=_timestamp(event),
            evaluation_event_storage_id=ids[index],
            materialization_event_storage_id=target.storage_id if target else None,
        )
    if not results:
        return
    # The rows of these checks and partitions only: a run's every row, read again for each
    # transaction, grew with the batch (300 projects: 11 transactions of 500 results).
    partitions = {partition for *_, partition in results}
    named = table.c.partition.in_(sorted(p for p in partitions if p is not None))
    planned = {tuple(row) for row in conn.execute(
        db.select(table.c.asset_key, table.c.check_name, table.c.run_id, table.c.partition)
        .where(table.c.run_id.in_({run for _, _, run, _ in results}),
               table.c.check_name.in_({check for _, check, _, _ in results}),
               db.or_(named, table.c.partition.is_(None)) if None in partitions else named))}
    new = []
    for (asset_key, check_name, run_id, partition), values in results.items():
        if (asset_key, check_name, run_id, partition) not in planned:
            new.append(dict(asset_key=asset_key, check_name=check_name, run_id=run_id, partition=partition, **values))
            continue
        where = table.c.partition == partition if partition is not None else table.c.partition.is_(None)
        conn.execute(table.update().where(db.and_(table.c.asset_key == asset_key, table.c.check_name == check_name,
                                                  table.c.run_id == run_id, where)).values(**values))
    if new:
        conn.execute(table.insert(), new)
