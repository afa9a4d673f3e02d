"""The graph layer: links between items (`item_references`), who is mentioned where (`mentions`)
and MR file lists (`mr_files`).

Like the normalized layer it is driven by `change_seq` and reads only the store: each run takes
the project's raw rows changed since its watermark, and for every issue or MR they touch rebuilds
the links written in it (title, description, notes, system notes: graph/refs.py says which words
make a link), the @usernames written in its title, description and notes (graph/mentions.py),
its people's rows (graph/people_rows.py: who authored, is assigned, reviews or commented) and, for an MR, its file list from the stored `/diffs` payload and the paths it touched (graph/path_rows.py). It runs after the
normalized layer and never ahead of it (its watermark stops at the normalized one), because links
are read from the normalized rows.

A link's target is resolved against the projects this store syncs, case-insensitively, as GitLab
resolves paths; a target elsewhere is kept and marked external. Each run re-resolves external
links once more, so adding a project to the configuration turns links to it into resolved ones
without rebuilding anything.
"""

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.graph import path_rows, people_rows
from gitlab_knowledge.graph.mentions import around, mentioned_names
from gitlab_knowledge.graph.refs import ISSUE_LINK_KINDS, MAX_SCAN, UNRELATED, extract
from gitlab_knowledge.layer_stats import LayerStats, timed, together_stats
from gitlab_knowledge.layers import GRAPH, NORMALIZED
from gitlab_knowledge.store.bulk import insert_rows
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.store.projects import canonical_paths
from gitlab_knowledge.store.watermarks import (
    RANGES,
    Ranges,
    get_watermark,
    get_watermarks,
    next_batch_end,
    pending_raw,
    range_params,
    run_batches,
    run_together,
)
from gitlab_knowledge.sync.files import RESOURCE as FILES
from gitlab_knowledge.workspace import Workspace

BATCH_ROWS = 5000
log = logging.getLogger(__name__)


@dataclass
class GraphStats(LayerStats):
    PREFIX: ClassVar[str] = GRAPH.prefix
    ASSET: ClassVar[str] = GRAPH.asset

    items_rebuilt: int = 0
    references: int = 0  # links written by the rebuilt items
    external: int = 0  # the project's links to projects this store does not sync
    mentions: int = 0  # @usernames written in the rebuilt items
    mr_file_lists: int = 0
    mr_files: int = 0
    batches: int = 0
    duration_s: float = 0.0


def refresh(workspace: Workspace, project_path: str, *, dagster_run_id: str | None = None,
            batch_rows: int = BATCH_ROWS) -> GraphStats:
    """The graph layer's entry point: bring one project's links and MR file lists up to date."""
    return timed(lambda stats: _refresh(workspace, project_path, dagster_run_id, batch_rows, stats), GraphStats())


def _refresh(workspace: Workspace, project_path: str, dagster_run_id: str | None, batch_rows: int,
             stats: GraphStats) -> None:
    gitlab_url = workspace.config.gitlab.url

    def batch_end(con: duckdb.DuckDBPyConnection, project_id: int, low: int) -> int | None:
        # Links are read from normalized rows: never ahead of the normalized layer.
        return next_batch_end(con, project_id, low, batch_rows,
                              ceiling=get_watermark(con, project_id, NORMALIZED.state))

    def finish(con: duckdb.DuckDBPyConnection, project_id: int) -> None:
        # Once per run, after the last batch: the same global pass after each batch would redo
        # what the next one redoes.
        _resolve_targets(con)
        stats.external = int(one_row(con.execute(
            "SELECT count(*) FROM item_references WHERE project_id = ? AND external", [project_id]))[0])

    stats.batches = run_batches(
        workspace.write, project_path, GRAPH.state, batch_end=batch_end,
        rebuild=lambda con, project_id, low, high: _rebuild_ranges(con, {project_id: (low, high)}, gitlab_url,
                                                                   lambda _project: stats),
        finish=finish, dagster_run_id=dagster_run_id)


def refresh_together(con: duckdb.DuckDBPyConnection, workspace: Workspace, project_ids: dict[str, int], *,
                     dagster_run_id: str | None = None,
                     batch_rows: int = BATCH_ROWS) -> tuple[dict[str, GraphStats], list[str]]:
    """`refresh` of several projects (path -> id) in one pass and one transaction on `con`, as
    normalized/refresh.py's `refresh_together`: the same rows, a stats record per project, and
    the paths left out of the pass for `refresh` one by one."""
    started = time.monotonic()
    stats = {pid: GraphStats() for pid in project_ids.values()}

    def pending(con: duckdb.DuckDBPyConnection, lows: dict[int, int]) -> dict[int, tuple[int, int]]:
        # Links are read from normalized rows: never ahead of the normalized layer.
        return pending_raw(con, lows, ceilings=get_watermarks(con, list(lows), NORMALIZED.state))

    def finish(con: duckdb.DuckDBPyConnection, project_ids: list[int]) -> None:
        _resolve_targets(con)  # once for the pass: it is a pass over every link
        external = dict(con.execute("SELECT project_id, count(*) FROM item_references WHERE external "
                                    "AND project_id IN (SELECT unnest(?::BIGINT[])) GROUP BY project_id",
                                    [project_ids]).fetchall())
        for pid in project_ids:
            stats[pid].external = int(external.get(pid, 0))

    gitlab_url = workspace.config.gitlab.url
    batches, left = run_together(
        con, list(stats), GRAPH.state, limit=batch_rows, pending=pending,
        rebuild=lambda con, ranges: _rebuild_ranges(con, ranges, gitlab_url, stats.__getitem__),
        finish=finish, dagster_run_id=dagster_run_id)
    return together_stats(project_ids, stats, batches, started), [p for p, pid in project_ids.items() if pid in left]


_ITEM_NAMES = frozenset(k.name for k in kinds.ITEM_KINDS)


def _rebuild_ranges(con: duckdb.DuckDBPyConnection, ranges: Ranges, gitlab_url: str,
                    stats_of: Callable[[int], GraphStats]) -> None:
    """Rebuild what the raw rows in each project's range (project id -> (low, high]) touch."""
    parents: dict[str, set[int]] = defaultdict(set)
    owner: dict[int, int] = {}  # an item's id -> its project's
    keyed: dict[tuple[int, str], set[int]] = defaultdict(set)  # kinds.KEYED_KINDS: raw row id = the row's id
    for project_id, raw_id, resource_type, key, parent_type, parent_id in con.execute(f"""
        SELECT r.project_id, id, resource_type, gitlab_key, parent_type, parent_id FROM raw_payloads r
        JOIN ({RANGES}) w ON r.project_id = w.project_id AND r.change_seq > w.low AND r.change_seq <= w.high
    """, range_params(ranges)).fetchall():
        if kinds.keyed(resource_type) is not None:
            keyed[project_id, resource_type].add(int(raw_id))
        elif resource_type in _ITEM_NAMES:
            parents[resource_type].add(int(key))
            owner[int(key)] = project_id
        elif parent_type in _ITEM_NAMES:
            parents[parent_type].add(int(parent_id))
            owner[int(parent_id)] = project_id
    paths = {pid: path or "" for pid, path in canonical_paths(con, list(ranges)).items()}
    for kind, ids in parents.items():
        _rebuild_references(con, owner, paths, gitlab_url, kinds.kind(kind), sorted(ids), stats_of)
        _rebuild_mentions(con, owner, kinds.kind(kind), sorted(ids), stats_of)
        people_rows.rebuild(con, kinds.kind(kind), sorted(ids))
    for (project_id, name), ids in keyed.items():
        _rebuild_keyed_references(con, project_id, paths[project_id], gitlab_url, name, sorted(ids),
                                  stats_of(project_id))
    # An MR's changed-file list is its own (merge_request_diffs payloads): no other kind has one.
    if parents.get(kinds.MERGE_REQUEST.name):
        _rebuild_files(con, owner, sorted(parents[kinds.MERGE_REQUEST.name]), stats_of)
        # The paths the MRs touched (file list and review notes), from the rows just rebuilt.
        path_rows.rebuild(con, sorted(parents[kinds.MERGE_REQUEST.name]))


def _rebuild_references(con: duckdb.DuckDBPyConnection, owner: dict[int, int], paths: dict[int, str], gitlab_url: str,
                        kind: kinds.Kind, ids: list[int], stats_of: Callable[[int], GraphStats]) -> None:
    con.execute("DELETE FROM item_references WHERE source_type = ? AND source_id IN (SELECT unnest(?::BIGINT[]))",
                [kind.name, ids])
    # Only what `extract` scans is read (GitLab's limit on a text's length): a longer description
    # or note is not copied whole out of DuckDB to be cut there.
    texts: list[tuple[int, int | None, str, str | None]] = []  # (item id, note id, found_in, text)
    for item_id, title, description in con.execute(f"""
        SELECT id, title, left(description, {MAX_SCAN}) FROM {kind.table} WHERE id IN (SELECT unnest(?::BIGINT[]))
    """, [ids]).fetchall():
        stats_of(owner[int(item_id)]).items_rebuilt += 1
        texts += [(int(item_id), None, "title", title), (int(item_id), None, "description", description)]
    for table, found_in in (("notes", "note"), ("system_notes", "system_note")):
        texts += [(int(item_id), int(note_id), found_in, body) for item_id, note_id, body in con.execute(f"""
            SELECT noteable_id, id, left(body, {MAX_SCAN}) FROM {table}
            WHERE noteable_type = ? AND noteable_id IN (SELECT unnest(?::BIGINT[]))
            ORDER BY noteable_id, created_at, id
        """, [kind.noteable_type, ids]).fetchall()]
    rows: list[dict[str, Any]] = []
    for item_id, note_id, found_in, text in texts:
        project_id = owner[item_id]
        for ref in extract(text, project_path=paths[project_id], gitlab_url=gitlab_url, source_type=kind.name,
                           found_in=found_in):
            if ref.kind == UNRELATED:
                # "removed the relation with #N" undoes the related or blocking links its item's
                # earlier system notes made (system notes are read in the order GitLab wrote them).
                target = (ref.target_type, ref.target_path.casefold(), ref.target_iid)
                rows = [r for r in rows if not (
                    r["source_id"] == item_id and r["found_in"] == "system_note" and r["kind"] in ISSUE_LINK_KINDS
                    and (r["target_type"], r["target_path"].casefold(), r["target_iid"]) == target)]
                continue
            rows.append({
                "project_id": project_id, "source_type": kind.name, "source_id": item_id, "note_id": note_id,
                "found_in": found_in, "kind": ref.kind, "target_type": ref.target_type,
                "target_path": ref.target_path, "target_iid": ref.target_iid, "target_project_id": None,
                "external": True, "text": ref.text,
            })
    insert_rows(con, "item_references", rows)
    for row in rows:
        stats_of(row["project_id"]).references += 1


def _rebuild_mentions(con: duckdb.DuckDBPyConnection, owner: dict[int, int], kind: kinds.Kind, ids: list[int],
                      stats_of: Callable[[int], GraphStats]) -> None:
    """Who the items' titles, descriptions and notes mention, with who wrote it when and (a note)
    its thread's state: what `me` needs to pick a user's mentions without reading the notes. The
    whole text is read (a mention deep in a long description counts), only where it holds an @."""
    con.execute("DELETE FROM mentions WHERE item_type = ? AND item_id IN (SELECT unnest(?::BIGINT[]))",
                [kind.name, ids])
    rows: list[dict[str, Any]] = []

    def add(row: dict[str, Any], text: str | None) -> None:
        rows.extend({**row, "item_type": kind.name, "username": name, "excerpt": around(text, name)}
                    for name in sorted(mentioned_names(text)))

    for item_id, project_id, title, description, author, created_at in con.execute(f"""
        SELECT id, project_id, title, description, author_username, created_at FROM {kind.table}
        WHERE id IN (SELECT unnest(?::BIGINT[])) AND (contains(title, '@') OR contains(description, '@'))
    """, [ids]).fetchall():
        item = {"project_id": project_id, "item_id": item_id, "note_id": None, "discussion_id": None,
                "author_username": author, "created_at": created_at, "resolvable": None, "resolved": None}
        add({**item, "found_in": "title"}, title)
        add({**item, "found_in": "description"}, description)
    for note_id, discussion_id, project_id, item_id, body, author, created_at, resolvable, resolved in con.execute("""
        SELECT id, discussion_id, project_id, noteable_id, body, author_username, created_at, resolvable, resolved
        FROM notes WHERE noteable_type = ? AND noteable_id IN (SELECT unnest(?::BIGINT[])) AND contains(body, '@')
    """, [kind.noteable_type, ids]).fetchall():
        add({"project_id": project_id, "item_id": item_id, "note_id": note_id, "discussion_id": discussion_id,
             "found_in": "note", "author_username": author, "created_at": created_at, "resolvable": resolvable,
             "resolved": resolved}, body)
    insert_rows(con, "mentions", rows)
    for row in rows:
        stats_of(owner[int(row["item_id"])]).mentions += 1


def _rebuild_keyed_references(con: duckdb.DuckDBPyConnection, project_id: int, project_path: str, gitlab_url: str,
                              name: str, ids: list[int], stats: GraphStats) -> None:
    """The links written in rows of a keyed kind (a wiki page's content): `mentions`, found in "text"."""
    kind = kinds.keyed(name)
    assert kind is not None
    con.execute("DELETE FROM item_references WHERE source_type = ? AND source_id IN (SELECT unnest(?::BIGINT[]))",
                [name, ids])
    rows: list[dict[str, Any]] = []
    for item_id, text in con.execute(f"""
        SELECT id, left({kind.text_column}, {MAX_SCAN}) FROM {kind.table} WHERE id IN (SELECT unnest(?::BIGINT[]))
    """, [ids]).fetchall():
        stats.items_rebuilt += 1
        for ref in extract(text, project_path=project_path, gitlab_url=gitlab_url, source_type=name, found_in="text"):
            rows.append({
                "project_id": project_id, "source_type": name, "source_id": int(item_id), "note_id": None,
                "found_in": "text", "kind": ref.kind, "target_type": ref.target_type,
                "target_path": ref.target_path, "target_iid": ref.target_iid, "target_project_id": None,
                "external": True, "text": ref.text,
            })
    insert_rows(con, "item_references", rows)
    stats.references += len(rows)


# Every path a link may name, lower case, and the synced project it names: each project's own
# path, and the old paths GitLab redirects to it (sync/redirects.py), unless a project has that
# path now (GitLab's redirect gives way to a project created at the old path).
_TARGET_PATHS = """
    SELECT lower(p.path_with_namespace) AS path, p.id FROM projects p
    UNION ALL
    SELECT a.path, a.project_id FROM project_aliases a JOIN projects p ON p.id = a.project_id
    WHERE a.path NOT IN (SELECT lower(path_with_namespace) FROM projects)
"""


def _resolve_targets(con: duckdb.DuckDBPyConnection) -> None:
    """Point every link at the synced project its path names (or mark it external)."""
    con.execute(f"""
        UPDATE item_references SET target_project_id = t.id, external = false
        FROM ({_TARGET_PATHS}) t
        WHERE t.path = lower(item_references.target_path)
          AND (item_references.target_project_id IS DISTINCT FROM t.id OR item_references.external)
    """)
    con.execute(f"""
        UPDATE item_references SET target_project_id = NULL, external = true
        WHERE target_project_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM ({_TARGET_PATHS}) t WHERE t.id = item_references.target_project_id
                          AND t.path = lower(item_references.target_path))
    """)


def _rebuild_files(con: duckdb.DuckDBPyConnection, owner: dict[int, int], ids: list[int],
                   stats_of: Callable[[int], GraphStats]) -> None:
    con.execute("DELETE FROM mr_files WHERE merge_request_id IN (SELECT unnest(?::BIGINT[]))", [ids])
    rows: list[dict[str, Any]] = []
    for mr_id, raw_id, text in con.execute("""
        SELECT r.parent_id, r.id, r.json FROM raw_payloads r
        JOIN merge_requests m ON m.id = r.parent_id
        WHERE r.resource_type = ? AND r.deleted_at IS NULL AND r.parent_id IN (SELECT unnest(?::BIGINT[]))
    """, [FILES, ids]).fetchall():
        try:
            files = json.loads(text)
        except ValueError:
            log.warning("skipped the file list of merge request id %s: not JSON", mr_id)
            continue
        project_id, stats = owner[int(mr_id)], stats_of(owner[int(mr_id)])
        stats.mr_file_lists += 1
        for position, f in enumerate(f for f in files if isinstance(f, dict)):
            rows.append({
                "merge_request_id": int(mr_id), "project_id": project_id, "position": position,
                "old_path": _text(f.get("old_path")), "new_path": _text(f.get("new_path")),
                "new_file": bool(f.get("new_file")), "renamed_file": bool(f.get("renamed_file")),
                "deleted_file": bool(f.get("deleted_file")), "raw_payload_id": int(raw_id),
            })
    insert_rows(con, "mr_files", rows)
    for row in rows:
        stats_of(row["project_id"]).mr_files += 1


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
