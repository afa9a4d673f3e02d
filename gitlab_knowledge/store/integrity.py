"""The store's integrity rules, each a query that counts violations (0 = the rule holds).

Scoped to one project (the partition a run synced) or the whole store. The Dagster asset checks
evaluate them after every sync and on a schedule; tests break the store on purpose to see each
one fail.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.timeutil import parse_time, utcnow


@dataclass
class Outcome:
    passed: bool
    violations: int
    description: str
    samples: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


def _scope(project_id: int | None, column: str = "project_id") -> tuple[str, list[Any]]:
    return (f" AND {column} = ?", [project_id]) if project_id is not None else ("", [])


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any], description: str,
           sample_sql: str | None = None) -> Outcome:
    n = int(one_row(con.execute(f"SELECT count(*) FROM ({sql})", params))[0])
    samples = []
    if n and sample_sql is not None:
        samples = [str(r[0]) for r in con.execute(f"SELECT {sample_sql} FROM ({sql}) LIMIT 5", params).fetchall()]
    return Outcome(n == 0, n, description if n == 0 else f"{n} violation(s): {description}", samples)


def items_have_raw_payloads(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every issue and merge request has its live raw payload."""
    scope, params = _scope(project_id, "t.project_id")
    sql = " UNION ALL ".join(f"""
        SELECT '{table}:' || t.id AS ref FROM {table} t LEFT JOIN raw_payloads r ON r.id = t.raw_payload_id
        WHERE (r.id IS NULL OR r.deleted_at IS NOT NULL){scope}""" for table in (k.table for k in kinds.ITEM_KINDS))
    return _count(con, sql, params * len(kinds.ITEM_KINDS), "every issue and MR has its live raw payload", "ref")


def no_system_notes(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """No system note is among the user notes (they have their own table, system_notes)."""
    scope, params = _scope(project_id, "n.project_id")
    sql = f"""
        SELECT n.id FROM notes n JOIN raw_payloads r ON r.id = n.raw_payload_id,
             unnest(CAST(json_extract(r.json, '$.notes') AS JSON[])) AS t(note)
        WHERE CAST(json_extract(note, '$.id') AS BIGINT) = n.id
          AND coalesce(CAST(json_extract(note, '$.system') AS BOOLEAN), false){scope}"""
    return _count(con, sql, params, "no system note is among the user notes", "id")


def no_orphans(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every note belongs to a thread, every thread to an issue or MR."""
    scope_n, params = _scope(project_id, "n.project_id")
    scope_d, _ = _scope(project_id, "d.project_id")
    # A thread hangs off one kind of item: one outer join per kind, and none of them found it.
    parents = "\n        ".join(f"LEFT JOIN {k.table} p{i} ON p{i}.id = d.{k.thread_column}"
                                 for i, k in enumerate(kinds.ITEM_KINDS))
    no_parent = " AND ".join(f"p{i}.id IS NULL" for i in range(len(kinds.ITEM_KINDS)))
    sql = f"""
        SELECT 'note:' || n.id AS ref FROM notes n LEFT JOIN discussions d ON d.id = n.discussion_id
        WHERE d.id IS NULL{scope_n}
        UNION ALL
        SELECT 'discussion:' || d.id FROM discussions d
        {parents}
        WHERE {no_parent}{scope_d}"""
    return _count(con, sql, params * 2, "every note belongs to a thread and every thread to an issue or MR", "ref")


def threads_have_their_notes(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every thread has at least one note; a standalone (individual_note) thread exactly one."""
    scope, params = _scope(project_id, "d.project_id")
    sql = f"""
        SELECT d.id, d.individual_note, count(n.id) AS notes FROM discussions d
        LEFT JOIN notes n ON n.discussion_id = d.id
        WHERE true{scope}
        GROUP BY d.id, d.individual_note, d.note_count
        HAVING count(n.id) = 0 OR count(n.id) <> d.note_count OR (d.individual_note AND count(n.id) <> 1)"""
    return _count(con, sql, params, "every thread has at least one note, and a standalone note exactly one", "id")


def note_dates_ordered(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every thread's first_note_at is at or before its last_note_at."""
    scope, params = _scope(project_id)
    sql = f"SELECT id FROM discussions WHERE first_note_at > last_note_at{scope}"
    return _count(con, sql, params, "every thread's first_note_at is at or before its last_note_at", "id")


def cursors_within_data(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every sync cursor is at or before the newest updated_at stored for its resource."""
    scope, params = _scope(project_id, "c.project_id")
    rows = con.execute(f"""
        SELECT c.project_id, c.resource_type, c.updated_at_cursor,
               (SELECT max(r.updated_at) FROM raw_payloads r WHERE r.project_id = c.project_id
                  AND r.resource_type = c.resource_type)
        FROM sync_cursors c WHERE true{scope}
    """, params).fetchall()
    bad = [f"{p}/{r}: cursor {c} > newest {m}" for p, r, c, m in rows if m is None or (parse_time(c) or m) > m]
    return Outcome(not bad, len(bad), "every cursor is at or before the newest updated_at stored"
                   if not bad else f"{len(bad)} cursor(s) ahead of the stored data", bad[:5])


def projects_synced_recently(con: duckdb.DuckDBPyConnection, projects: list[str],
                             max_age: timedelta = timedelta(minutes=30)) -> Outcome:
    last = dict(con.execute(
        "SELECT project_path, max(finished_at) FROM sync_runs WHERE status = 'succeeded' GROUP BY 1").fetchall())
    now = utcnow()
    stale = []
    ages = {}
    for project in projects:
        when = last.get(project)
        ages[project] = round((now - when).total_seconds() / 60, 1) if when else None
        if when is None or now - when > max_age:
            stale.append(f"{project}: last successful sync " + (f"{ages[project]} min ago" if when else "never"))
    minutes = int(max_age.total_seconds() // 60)
    return Outcome(not stale, len(stale), f"every project synced successfully in the last {minutes} minutes"
                   if not stale else f"{len(stale)} project(s) not synced in the last {minutes} minutes",
                   stale, {"minutes_since_last_success": {k: v for k, v in ages.items() if v is not None}})


def mrs_have_file_lists(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every merge request in the store has its file list (fetched from GitLab's /diffs)."""
    scope, params = _scope(project_id, "m.project_id")
    sql = f"""
        SELECT m.reference AS ref FROM merge_requests m
        WHERE NOT EXISTS (SELECT 1 FROM raw_payloads f WHERE f.resource_type = 'merge_request_diffs'
                          AND f.parent_id = m.id AND f.deleted_at IS NULL){scope}"""
    return _count(con, sql, params, "every merge request has its file list (a sync fetches missing ones)", "ref")


def references_resolved(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every link's target is in the store, or in a project this store does not sync (external)."""
    scope, params = _scope(project_id, "r.project_id")
    sigils = " ".join("WHEN ? THEN ?" for _ in kinds.ITEM_KINDS)
    missing = "".join(f"""
          AND NOT EXISTS (SELECT 1 FROM {k.table} t WHERE r.target_type = ?
                          AND t.project_id = r.target_project_id AND t.iid = r.target_iid)""" for k in kinds.ITEM_KINDS)
    sql = f"""
        SELECT r.target_path || CASE r.target_type {sigils} END || r.target_iid
               || ' (' || r.text || ')' AS ref
        FROM item_references r
        WHERE NOT r.external{scope}{missing}"""
    params = [*(v for k in kinds.ITEM_KINDS for v in (k.name, k.sigil)), *params,
              *(k.name for k in kinds.ITEM_KINDS)]
    return _count(con, sql, params, "every link's target is in the store or marked external "
                  "(a miss: a typo'd number, or an item the token cannot see)", "ref")


def no_system_note_in_documents(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """No system note reaches a search document: no document of a thread without user notes, and
    no thread document holding a system note as one of its notes."""
    scope, params = _scope(project_id, "d.project_id")
    sql = f"""
        SELECT d.id FROM documents d
        WHERE d.source_type = 'discussion'{scope}
          AND NOT EXISTS (SELECT 1 FROM discussions t WHERE t.id = d.source_id)
        UNION ALL
        SELECT d.id FROM documents d JOIN system_notes s ON s.discussion_id = d.source_id
        WHERE d.source_type = 'discussion'{scope} AND s.body <> ''
          AND contains(d.content_text, '@' || coalesce(s.author_username, 'unknown') || ' ('
                       || coalesce(strftime(s.created_at, '%Y-%m-%d'), 'unknown date') || '):' || chr(10) || s.body)"""
    return _count(con, sql, params * 2, "no system note reaches a search document", "id")


RULES: dict[str, tuple[Callable[[duckdb.DuckDBPyConnection, int | None], Outcome], str]] = {
    "items_have_raw_payloads": (items_have_raw_payloads, "normalized"),
    "no_system_notes": (no_system_notes, "normalized"),
    "no_orphan_notes_or_threads": (no_orphans, "normalized"),
    "threads_have_their_notes": (threads_have_their_notes, "normalized"),
    "note_dates_ordered": (note_dates_ordered, "normalized"),
    "cursors_within_data": (cursors_within_data, "raw"),
    "mrs_have_file_lists": (mrs_have_file_lists, "graph"),
    "references_resolved": (references_resolved, "graph"),
    "no_system_note_in_documents": (no_system_note_in_documents, "documents"),
}
# Rules whose violations are worth a warning, not a failed check: a link to `#99999` is a user's
# typo or an item the token cannot see, not a broken store.
WARN_ONLY = {"references_resolved"}


def index_agreement(status: dict[str, Any], project: str | None, index: str) -> Outcome:
    """Documents == entries of `index` ('vectors' or 'lexical'), same content hashes."""
    rows = [p for p in status["projects"] if project is None or p["project"] == project]
    bad = []
    off_by_project: dict[str, int] = {}
    for p in rows:
        s = p[index]
        # A document whose embedding failed has no vector: documents != vectors, whatever the reason.
        off = s["stale"] + s["unindexed"] + s["orphaned"] + s["failed"]
        if off:
            off_by_project[p["project"]] = off
            bad.append(f"{p['project']}: {s['stale']} stale, {s['unindexed'] + s['failed']} missing "
                       f"({s['failed']} failed to embed), {s['orphaned']} orphaned of {p['documents']} documents")
    what = {"vectors": "vector", "lexical": "lexical entry"}[index]
    # The violations are the entries off (stale, missing or orphaned), not the projects holding them.
    total = sum(off_by_project.values())
    return Outcome(not bad, total, f"every document has exactly one {what} with its current content hash"
                   if not bad else f"{index} out of step with the documents: {total} entr"
                                   f"{'y' if total == 1 else 'ies'} stale, missing or orphaned in "
                                   + ", ".join(off_by_project), bad,
                   {"documents": sum(p["documents"] for p in rows),
                    f"{index}_indexed": sum(p[index]["indexed"] for p in rows)})


def no_failed_embeddings(status: dict[str, Any], project: str | None) -> Outcome:
    failed = {p["project"]: p["vectors"]["failed"] for p in status["projects"]
              if (project is None or p["project"] == project) and p["vectors"]["failed"]}
    total = sum(failed.values())
    return Outcome(not failed, total, "no document is waiting for a failed embedding to be retried" if not failed
                   else f"{total} document(s) failed to embed and wait for the next run", [f"{k}: {v}" for k, v in
                                                                                         failed.items()])
