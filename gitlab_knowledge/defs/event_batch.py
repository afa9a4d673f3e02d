"""A batch run's per-partition events, written to Dagster's event log many at a time.

A batch run (defs/batch.py) records ~20 events per project on that project's partitions: a
materialization per layer and a result per check. Logged one by one, Dagster's SQLite storage
gave each a new engine, connection and fsync'd commit, twice (the event's row, then its index
row): ~190 ms per project, 19.0 s of a 120 s first sync of 100 projects. Here they are held and
logged as one Dagster event batch (`DagsterEventBatchMetadata`, what Dagster itself uses for a
multi-partition output's materializations), which the instance hands to the storage's
`store_event_batch` in one piece while `DAGSTER_EVENT_BATCH_SIZE` allows it; the repository's
storage (gitlab_knowledge/event_log.py) writes that in one transaction. Another storage (the
scale-out's Postgres, a user's own) gets them one by one, as before.

The events are the ones Dagster builds for a materialization or a check result logged by the
step (`DagsterEvent.from_step`), with the same messages; what the UI shows from them is unchanged.
"""

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import dagster as dg

BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"  # read by the instance at every event (Dagster 1.13)
# At most this many events per transaction: a longer one would hold SQLite's write lock from the
# webserver, the daemon and other runs for longer (measured: ~70 ms a transaction, at load 10, for
# batches of up to 500; the events are serialized before the write starts).
EVENTS_PER_TRANSACTION = 500
# A step writes what it holds once its oldest event is this old (at the next natural boundary,
# defs/batch.py): a commit costs 2-25 ms on a busy disk, so one per project would cost more than
# its events do, while the UI lags by at most this much (or the time one project takes).
HOLD_S = 5.0


class EventBatch:
    """The materializations and check results a step holds until `flush`."""

    def __init__(self, context: dg.OpExecutionContext) -> None:
        from gitlab_knowledge.event_log import BatchingSqliteEventLogStorage

        self._step = context.get_step_execution_context()
        # Only the repository's storage gets batches: Dagster's Postgres storage writes a batch as
        # if it held one asset's partitions (the asset key row of the last event only).
        self._batching = isinstance(context.instance.event_log_storage, BatchingSqliteEventLogStorage)
        self._pending: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
        self._since = 0.0  # when the oldest held event was added

    def add(self, event: dg.AssetMaterialization | dg.AssetCheckEvaluation) -> None:
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(event)

    @property
    def held_long(self) -> bool:
        """Whether the oldest held event has waited HOLD_S or more."""
        return bool(self._pending) and time.monotonic() - self._since >= HOLD_S

    def flush(self) -> None:
        """Log every held event, as Dagster event batches of up to EVENTS_PER_TRANSACTION."""
        from dagster._core.events import DagsterEventBatchMetadata, generate_event_batch_id

        if not self._batching:
            while self._pending:
                _log(self._step, self._pending[0], None)
                del self._pending[0]
            return
        while self._pending:
            chunk = self._pending[:EVENTS_PER_TRANSACTION]
            batch_id = generate_event_batch_id()
            with _batch_writing(len(chunk)):
                for index, event in enumerate(chunk):
                    _log(self._step, event, DagsterEventBatchMetadata(batch_id, index == len(chunk) - 1))
            # Dropped once written: a chunk an interrupt cut short is written again by the next flush.
            del self._pending[:len(chunk)]


def _log(step: Any, event: dg.AssetMaterialization | dg.AssetCheckEvaluation, batch: Any) -> None:
    """Build and log the event Dagster builds for `event` logged by the step, in `batch`."""
    from dagster._core.events import DagsterEvent, DagsterEventType

    if isinstance(event, dg.AssetMaterialization):
        DagsterEvent.asset_materialization(step, event, batch)
        return
    # DagsterEvent.asset_check_evaluation with its message, which takes no batch metadata.
    DagsterEvent.from_step(
        DagsterEventType.ASSET_CHECK_EVALUATION, step, event,
        message=f"Asset check '{event.check_name}' on '{event.asset_key.to_user_string()}' "
                + ("passed." if event.passed else "did not pass.")
                + ("" if event.description is None else f" Description: '{event.description}'"),
        batch_metadata=batch)


@contextlib.contextmanager
def _batch_writing(size: int) -> Iterator[None]:
    """Let the instance hold a batch of `size` events (it writes one at a time while the variable
    is unset or 0); only events logged with batch metadata are held, so nothing else changes."""
    before = os.environ.get(BATCH_SIZE_ENV)
    os.environ[BATCH_SIZE_ENV] = str(max(size, int(before or 0)))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BATCH_SIZE_ENV, None)
        else:
            os.environ[BATCH_SIZE_ENV] = before
