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
    return get_watermarks(con, [project_id], layer)[project_id]


def set_watermark(con: Connection, project_id: int, layer: str, watermark: int, dagster_run_id: str | None) -> None:
    set_watermarks(con, {project_id: watermark}, layer, dagster_run_id)


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


# Several projects' ranges in one statement: `(low, high]` of `change_seq` per project id. A
# layer's pass over the projects a batch has landed (`run_together`) reads them as this table.
Ranges = dict[int, tuple[int, int]]
RANGES = ("SELECT unnest($projects::BIGINT[]) AS project_id, unnest($lows::BIGINT[]) AS low, "
          "unnest($highs::BIGINT[]) AS high")


def range_params(ranges: Ranges) -> dict[str, list[int]]:
    """The parameters `RANGES` reads."""
    return {"projects": list(ranges), "lows": [low for low, _ in ranges.values()],
            "highs": [high for _, high in ranges.values()]}


def get_watermarks(con: Connection, project_ids: list[int], layer: str) -> dict[int, int]:
    """`get_watermark` of each project, in one query."""
    found = dict(con.execute("SELECT project_id, watermark FROM layer_state WHERE layer = ? "
                             "AND project_id IN (SELECT unnest(?::BIGINT[]))", [layer, project_ids]).fetchall())
    return {pid: int(found.get(pid, 0)) for pid in project_ids}


def set_watermarks(con: Connection, highs: dict[int, int], layer: str, dagster_run_id: str | None) -> None:
    """`set_watermark` of each project, in one statement."""
    if highs:
        con.execute("INSERT OR REPLACE INTO layer_state SELECT unnest(?::BIGINT[]), ?, unnest(?::BIGINT[]), ?, ?",
                    [list(highs), layer, list(highs.values()), utcnow(), dagster_run_id])


def pending_raw(con: Connection, lows: dict[int, int], ceilings: dict[int, int] | None = None) -> dict[int, tuple[int, int]]:
    """Per project with raw rows after its watermark in `lows` (and at or before its ceiling):
    (the last such change_seq, how many rows), in one query."""
    highs = ceilings if ceilings is not None else {pid: 2**62 for pid in lows}
    rows = con.execute(f"""
        SELECT w.project_id, max(r.change_seq), count(*) FROM raw_payloads r JOIN ({RANGES}) w
          ON r.project_id = w.project_id AND r.change_seq > w.low AND r.change_seq <= w.high
        GROUP BY w.project_id
    """, range_params({pid: (low, highs[pid]) for pid, low in lows.items()})).fetchall()
    return {int(pid): (int(high), int(n)) for pid, high, n in rows}


def run_together(con: Connection, project_ids: list[int], layer: str, *, limit: int,
                 pending: Callable[[Connection, dict[int, int]], dict[int, tuple[int, int]]],
                 rebuild: Callable[[Connection, Ranges], None],
                 finish: Callable[[Connection, list[int]], None] | None = None,
                 dagster_run_id: str | None = None) -> tuple[dict[int, int], list[int]]:
    """`run_batches` for several projects at once, in one transaction: the statements of a pass
    are the same whether it carries one project or fifty. `pending(con, lows)` says, per project
    with rows after its watermark, (where its rows end, how many); `rebuild(con, ranges)` rebuilds
    every project's range together. Projects join the pass while their rows add up to at most
    `limit` (what one batch of `run_batches` holds); those that do not fit are returned to be run
    one by one. Returns ({project id: batches it took}, the project ids left out)."""
    lows = get_watermarks(con, project_ids, layer)
    waiting = pending(con, lows)
    taken: list[int] = []
    left: list[int] = []
    rows = 0
    for pid in project_ids:
        n = waiting.get(pid, (0, 0))[1]
        if taken and rows + n > limit or n > limit:
            left.append(pid)
        else:
            taken.append(pid)
            rows += n
    batches = dict.fromkeys(taken, 0)
    with transaction(con):
        while True:
            ranges = {pid: (lows[pid], waiting[pid][0]) for pid in taken if pid in waiting}
            if not ranges:
                break
            rebuild(con, ranges)
            set_watermarks(con, {pid: high for pid, (_, high) in ranges.items()}, layer, dagster_run_id)
            for pid in ranges:
                batches[pid] += 1
            # A rebuild may move rows of the pass past their range (documents: the MRs that close
            # an issue that changed): the pass goes on until its projects are caught up.
            lows = {pid: high for pid, (_, high) in ranges.items()}
            waiting = pending(con, lows)
        if finish is not None:
            finish(con, taken)
    return batches, left
