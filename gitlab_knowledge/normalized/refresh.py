"""The normalized layer: raw payloads → projects, issues, MRs, labels, discussions, notes.

Driven by `change_seq`: each run takes the raw rows of the project changed since its watermark,
rebuilds every parent (issue or MR) they touch — the parent row, its labels, and all of its
threads and notes, in one transaction, so a deleted note disappears — and moves the watermark in
the same transaction. It reads only the store, so it can be re-run at any time (after a schema
change, a crash between layers) without calling GitLab.
"""

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.layer_stats import LayerStats, timed, together_stats
from gitlab_knowledge.layers import NORMALIZED
from gitlab_knowledge.normalized.keyed import rebuild_keyed
from gitlab_knowledge.normalized.transform import (
    ROW_BUILDERS,
    project_row,
    system_note_rows,
    thread_rows,
)
from gitlab_knowledge.store.bulk import insert_rows
from gitlab_knowledge.store.payloads import item_name, item_problem, thread_problem
from gitlab_knowledge.store.watermarks import (
    RANGES,
    Ranges,
    next_batch_end,
    pending_raw,
    range_params,
    run_batches,
    run_together,
)
from gitlab_knowledge.workspace import Workspace

BATCH_ROWS = 5000
log = logging.getLogger(__name__)


@dataclass
class NormalizeStats(LayerStats):
    PREFIX: ClassVar[str] = NORMALIZED.prefix
    ASSET: ClassVar[str] = NORMALIZED.asset

    raw_changes: int = 0
    parents_rebuilt: int = 0
    parents_deleted: int = 0
    discussions: int = 0
    notes: int = 0
    system_notes: int = 0
    rejected: int = 0  # stored payloads the normalized tables cannot hold (skipped, logged)
    batches: int = 0
    duration_s: float = 0.0


def refresh(workspace: Workspace, project_path: str, *, dagster_run_id: str | None = None,
            batch_rows: int = BATCH_ROWS) -> NormalizeStats:
    """The normalized layer's entry point: bring one project's tables up to date with its raw payloads."""
    return timed(lambda stats: _refresh(workspace, project_path, dagster_run_id, batch_rows, stats), NormalizeStats())


def _refresh(workspace: Workspace, project_path: str, dagster_run_id: str | None, batch_rows: int,
             stats: NormalizeStats) -> None:
    stats.batches = run_batches(
        workspace.write, project_path, NORMALIZED.state,
        batch_end=lambda con, project_id, low: next_batch_end(con, project_id, low, batch_rows),
        rebuild=lambda con, project_id, low, high: _normalize_ranges(con, {project_id: (low, high)},
                                                                     lambda _project: stats),
        dagster_run_id=dagster_run_id)


def refresh_together(con: duckdb.DuckDBPyConnection, project_ids: dict[str, int], *,
                     dagster_run_id: str | None = None,
                     batch_rows: int = BATCH_ROWS) -> tuple[dict[str, NormalizeStats], list[str]]:
    """`refresh` of several projects (path -> id) in one pass and one transaction on `con` (a
    batch's store layers, defs/many_projects.py): the same rows, a stats record per project, and
    the paths left out of the pass (more rows than one batch holds) for `refresh` one by one."""
    started = time.monotonic()
    stats = {pid: NormalizeStats() for pid in project_ids.values()}
    batches, left = run_together(
        con, list(stats), NORMALIZED.state, limit=batch_rows, pending=pending_raw,
        rebuild=lambda con, ranges: _normalize_ranges(con, ranges, stats.__getitem__), dagster_run_id=dagster_run_id)
    return together_stats(project_ids, stats, batches, started), [p for p, pid in project_ids.items() if pid in left]


def _normalize_ranges(con: duckdb.DuckDBPyConnection, ranges: Ranges,
                      stats_of: Callable[[int], NormalizeStats]) -> None:
    """Rebuild what the raw rows in each project's range (project id -> (low, high]) touch."""
    changed = con.execute(f"""
        SELECT r.project_id, resource_type, gitlab_key, parent_type, parent_id FROM raw_payloads r
        JOIN ({RANGES}) w ON r.project_id = w.project_id AND r.change_seq > w.low AND r.change_seq <= w.high
    """, range_params(ranges)).fetchall()
    parents: dict[str, set[int]] = defaultdict(set)
    owner: dict[int, int] = {}  # a parent's id -> its project's
    keyed: dict[tuple[int, str], list[str]] = defaultdict(list)  # kinds.KEYED_KINDS: rows by gitlab_key
    projects: list[int] = []
    for project_id, resource_type, key, parent_type, parent_id in changed:
        stats_of(project_id).raw_changes += 1
        if kinds.keyed(resource_type) is not None:
            keyed[project_id, resource_type].append(key)
        elif resource_type == "project":
            projects.append(int(key))
        elif resource_type in ROW_BUILDERS:
            parents[resource_type].add(int(key))
            owner[int(key)] = project_id
        elif resource_type == "discussion" and parent_type in ROW_BUILDERS:
            parents[parent_type].add(int(parent_id))
            owner[int(parent_id)] = project_id
    if projects:
        _upsert_projects(con, projects)
    for kind, ids in parents.items():
        _rebuild_parents(con, owner, kind, sorted(ids), stats_of)
    for (project_id, kind), keys in keyed.items():
        written, gone = rebuild_keyed(con, project_id, kind, keys)
        stats_of(project_id).parents_rebuilt += written
        stats_of(project_id).parents_deleted += gone


def _upsert_projects(con: duckdb.DuckDBPyConnection, project_ids: list[int]) -> None:
    stored = con.execute("SELECT id, json FROM raw_payloads WHERE resource_type = 'project' AND deleted_at IS NULL "
                         "AND gitlab_key IN (SELECT unnest(?::TEXT[]))", [[str(p) for p in project_ids]]).fetchall()
    con.execute("DELETE FROM projects WHERE id IN (SELECT unnest(?::BIGINT[]))", [project_ids])
    insert_rows(con, "projects", [project_row(json.loads(text), int(raw_id)) for raw_id, text in stored])


def _rebuild_parents(con: duckdb.DuckDBPyConnection, owner: dict[int, int], kind: str, ids: list[int],
                     stats_of: Callable[[int], NormalizeStats]) -> None:
    """Rebuild the parents `ids` of `kind` (of the projects `owner` says) with their threads and notes."""
    k = kinds.kind(kind)
    table, label_table, noteable_type, to_row = k.table, k.labels_table, k.noteable_type, ROW_BUILDERS[kind]
    label_fk = fk_column = k.thread_column
    payloads = con.execute("""
        SELECT CAST(gitlab_key AS BIGINT), id, json FROM raw_payloads
        WHERE resource_type = ? AND deleted_at IS NULL AND gitlab_key IN (SELECT unnest(?::TEXT[]))
    """, [kind, [str(i) for i in ids]]).fetchall()
    threads = con.execute("""
        SELECT parent_id, id, position, json FROM raw_payloads
        WHERE resource_type = 'discussion' AND deleted_at IS NULL AND parent_type = ?
          AND parent_id IN (SELECT unnest(?::BIGINT[]))
        ORDER BY parent_id, position
    """, [kind, ids]).fetchall()

    con.execute("DELETE FROM note_positions WHERE note_id IN (SELECT id FROM notes WHERE noteable_type = ? "
                "AND noteable_id IN (SELECT unnest(?::BIGINT[])))", [noteable_type, ids])
    for notes_table in ("notes", "system_notes"):
        con.execute(f"DELETE FROM {notes_table} WHERE noteable_type = ? AND noteable_id IN (SELECT unnest(?::BIGINT[]))",
                    [noteable_type, ids])
    con.execute(f"DELETE FROM discussions WHERE {fk_column} IN (SELECT unnest(?::BIGINT[]))", [ids])
    con.execute(f"DELETE FROM {label_table} WHERE {label_fk} IN (SELECT unnest(?::BIGINT[]))", [ids])
    con.execute(f"DELETE FROM {table} WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids])

    parent_rows: list[dict[str, Any]] = []
    label_rows: list[dict[str, Any]] = []
    project_labels: set[tuple[int, str]] = set()
    listed = {int(gid) for gid, _raw_id, _text in payloads}
    for gid, raw_id, text in _drained(payloads):
        row = _checked(lambda payload, raw_id=raw_id: to_row(payload, int(raw_id)), text, _stored_item_problem,
                       lambda payload, gid=gid: item_name(k.display, payload) if payload else f"{k.display} id {gid}",
                       stats_of(owner[int(gid)]))
        if row is None:
            continue
        parent_rows.append(row)
        for name in row["labels"]:
            label_rows.append({label_fk: row["id"], "label_name": name})
            project_labels.add((row["project_id"], name))
    live = {row["id"] for row in parent_rows}
    for row in parent_rows:
        stats_of(owner[row["id"]]).parents_rebuilt += 1
    text = None  # the last payload's JSON too: only its rows go on to the inserts
    for gone in set(ids) - listed:
        stats_of(owner[gone]).parents_deleted += 1

    discussion_rows, note_rows, position_rows, system_rows = [], [], [], []
    note_ids: set[int] = set()
    for parent_id, raw_id, position, text in _drained(threads):
        if parent_id not in live:
            continue  # an orphan thread of a vanished parent is never stored
        project_id, stats = owner[int(parent_id)], stats_of(owner[int(parent_id)])
        built = _checked(lambda thread, parent_id=parent_id, raw_id=raw_id, position=position, project_id=project_id: (
            str(thread["id"]),
            *thread_rows(thread, parent_type=kind, parent_id=int(parent_id), project_id=project_id,
                         position=int(position or 0), raw_payload_id=int(raw_id)),
            system_note_rows(thread, parent_type=kind, parent_id=int(parent_id), project_id=project_id,
                             raw_payload_id=int(raw_id))), text, _stored_thread_problem,
            lambda _payload, parent_id=parent_id: f"a discussion of {k.display} id {parent_id}", stats)
        if built is None:
            continue
        thread_id, discussion, notes, positions, system = built
        if any(n["id"] in note_ids for n in [*notes, *system]):
            # One note in two threads is not GitLab's doing; the first thread keeps it.
            _skip(f"discussion {thread_id} of {k.display} id {parent_id}: repeats a note of another thread", stats)
            continue
        note_ids.update(n["id"] for n in [*notes, *system])
        system_rows.extend(system)
        stats.system_notes += len(system)
        if discussion is None:
            continue  # a thread of system notes only: no discussion row, nothing for documents
        discussion_rows.append(discussion)
        note_rows.extend(notes)
        stats.discussions += 1
        stats.notes += len(notes)
        position_rows.extend(positions)
    text = None
    insert_rows(con, table, parent_rows, {"change_seq": "nextval('change_seq')"})
    insert_rows(con, label_table, label_rows)
    if project_labels:
        insert_rows(con, "labels", [{"project_id": p, "name": n} for p, n in sorted(project_labels)],
                    or_replace=True)
    insert_rows(con, "discussions", discussion_rows)
    insert_rows(con, "notes", note_rows)
    insert_rows(con, "note_positions", position_rows)
    insert_rows(con, "system_notes", system_rows)


def _drained(rows: list[Any]) -> Iterator[Any]:
    """Each of `rows`, let go of by the list as it is handed out: a payload's JSON text (up to
    128 MB) is parsed and built into rows, and need not be held beside them until the batch ends."""
    for index in range(len(rows)):
        row, rows[index] = rows[index], None
        yield row


def _stored_item_problem(payload: Any) -> str | None:
    return item_problem(payload, utf8=False)  # text read from DuckDB is valid UTF-8


def _stored_thread_problem(payload: Any) -> str | None:
    return thread_problem(payload, utf8=False)


def _skip(message: str, stats: NormalizeStats) -> None:
    stats.rejected += 1
    log.warning("skipped %s", message)


def _checked(build: Callable[..., Any], text: str, problem_of: Callable[[Any], str | None],
             name_of: Callable[..., str], stats: NormalizeStats) -> Any:
    """`build(payload)` for a stored payload that passes its checks, else None (logged and
    counted): a bad row written by an older version must not fail this and every later run.
    (`...`: callers bind loop values as lambda defaults, which mypy cannot match to `[Any]`.)"""
    payload = None
    try:
        payload = json.loads(text)
        problem = problem_of(payload)
        if problem is None:
            return build(payload)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    _skip(f"{name_of(payload)}: {problem}", stats)
    return None
