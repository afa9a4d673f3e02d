"""Layer watermarks (`layer_state`) and the batch loop the store-driven layers share.

The normalized, graph and documents layers each keep a per-project watermark: the `change_seq` up
to which their rows are rebuilt. A run takes the rows after it in batches; each batch is rebuilt
and the watermark moved in one transaction, so a crash loses at most the batch in flight and the
next run resumes there. `run_batches` is that loop; a layer gives it where a batch ends and how to
rebuild one.
"""

import contextlib
from collections.abc import Callable

import duckdb

from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.timeutil import utcnow

Connection = duckdb.DuckDBPyConnection


def get_watermark(con: Connection, project_id: int, layer: str) -> int:
    row = con.execute("SELECT watermark FROM layer_state WHERE project_id = ? AND layer = ?",
                      [project_id, layer]).fetchone()
    return int(row[0]) if row else 0


def set_watermark(con: Connection, project_id: int, layer: str, watermark: int, dagster_run_id: str | None) -> None:
    con.execute("INSERT OR REPLACE INTO layer_state VALUES (?, ?, ?, ?, ?)",
                [project_id, layer, watermark, utcnow(), dagster_run_id])


def next_batch_end(con: Connection, project_id: int, low: int, batch_rows: int,
                   ceiling: int | None = None) -> int | None:
    """The change_seq that ends the next batch of at most `batch_rows` raw rows of the project
    after `low` (and at or before `ceiling`); None when there is none."""
    bound, params = ("", []) if ceiling is None else (" AND change_seq <= ?", [ceiling])
    row = con.execute(f"""
        SELECT change_seq FROM raw_payloads WHERE project_id = ? AND change_seq > ?{bound}
        ORDER BY change_seq LIMIT 1 OFFSET ?
    """, [project_id, low, *params, batch_rows - 1]).fetchone() or con.execute(
        f"SELECT max(change_seq) FROM raw_payloads WHERE project_id = ? AND change_seq > ?{bound}",
        [project_id, low, *params]).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def run_batches(write: Callable[[], contextlib.AbstractContextManager[Connection]], project_path: str, layer: str,
                *, batch_end: Callable[[Connection, int, int], int | None],
                rebuild: Callable[[Connection, int, int, int], None],
                finish: Callable[[Connection, int], None] | None = None,
                dagster_run_id: str | None = None) -> int:
    """Rebuild `project_path`'s rows of `layer` after its watermark, batch by batch, and return how
    many batches it took. `batch_end(con, project_id, low)` says where the next batch ends (None:
    caught up); `rebuild(con, project_id, low, high)` rebuilds the rows in (low, high], and the
    watermark moves to `high` in the same transaction; `finish(con, project_id)` runs once, in its
    own transaction, when the layer is caught up. A project not stored yet has nothing to do."""
    batches = 0
    while True:
        # One connection per batch: readers (CLI `count`, `show`) get the file between batches.
        with write() as con:
            project_id = project_id_for(con, project_path)
            if project_id is None:
                return batches
            low = get_watermark(con, project_id, layer)
            high = batch_end(con, project_id, low)
            if high is None:
                if finish is not None:
                    with transaction(con):
                        finish(con, project_id)
                return batches
            with transaction(con):
                rebuild(con, project_id, low, high)
                set_watermark(con, project_id, layer, high, dagster_run_id)
        batches += 1
