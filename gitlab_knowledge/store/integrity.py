"""The store's integrity rules, each a query that counts violations (0 = the rule holds).

Scoped to one project (the partition a run synced) or the whole store. The Dagster asset checks
evaluate them after every sync and on a schedule; tests break the store on purpose to see each
one fail.
"""

from collections.abc import Callable, Sequence
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


def _outcome(n: int, samples: list[str], description: str) -> Outcome:
    return Outcome(n == 0, n, description if n == 0 else f"{n} violation(s): {description}", samples)


def _grouped(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any], description: str,
             project_ids: Sequence[int]) -> dict[int, Outcome]:
    """One pass of a rule over the given projects: `sql` selects a row `(pid, ref)` per violation
    across the whole store, and the filter on `pid` is pushed into its scans. A project without a
    violation gets the passing outcome."""
    out = {pid: _outcome(0, [], description) for pid in project_ids}
    if not project_ids:
        return out
    ids = ", ".join(str(int(pid)) for pid in project_ids)  # ints from the store: safe inline, and a plain IN list
    for pid, n, samples in con.execute(f"""
            SELECT pid, count(*), list(CAST(ref AS VARCHAR))[1:5] FROM ({sql}) WHERE pid IN ({ids}) GROUP BY pid
            """, params).fetchall():
        out[int(pid)] = _outcome(int(n), [str(x) for x in samples], description)
    return out


def _everywhere(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any], description: str) -> Outcome:
    n, samples = one_row(con.execute(f"SELECT count(*), list(CAST(ref AS VARCHAR))[1:5] FROM ({sql})", params))
    return _outcome(int(n), [str(x) for x in samples or []] if n else [], description)


# Each rule is a query of its violations over the whole store, one row `(pid, ref)` each, and
# what it asserts. A check of one project and a batch's checks of many run the same query, the
# batch in one pass grouped by project (`evaluate_many`) instead of once per project.
Violations = Callable[[], tuple[str, list[Any]]]


def _items_without_raw() -> tuple[str, list[Any]]:
    return " UNION ALL ".join(f"""
        SELECT t.project_id AS pid, '{table}:' || t.id AS ref FROM {table} t
        LEFT JOIN raw_payloads r ON r.id = t.raw_payload_id
        WHERE (r.id IS NULL OR r.deleted_at IS NOT NULL)""" for table in (k.table for k in kinds.ITEM_KINDS)), []


def _system_notes_among_notes() -> tuple[str, list[Any]]:
    return """
        SELECT n.project_id AS pid, n.id AS ref FROM notes n JOIN raw_payloads r ON r.id = n.raw_payload_id,
             unnest(CAST(json_extract(r.json, '$.notes') AS JSON[])) AS t(note)
        WHERE CAST(json_extract(note, '$.id') AS BIGINT) = n.id
          AND coalesce(CAST(json_extract(note, '$.system') AS BOOLEAN), false)""", []


def _orphans() -> tuple[str, list[Any]]:
    # A thread hangs off one kind of item: one outer join per kind, and none of them found it.
    parents = "\n        ".join(f"LEFT JOIN {k.table} p{i} ON p{i}.id = d.{k.thread_column}"
                                 for i, k in enumerate(kinds.ITEM_KINDS))
    no_parent = " AND ".join(f"p{i}.id IS NULL" for i in range(len(kinds.ITEM_KINDS)))
    return f"""
        SELECT n.project_id AS pid, 'note:' || n.id AS ref FROM notes n LEFT JOIN discussions d ON d.id = n.discussion_id
        WHERE d.id IS NULL
        UNION ALL
        SELECT d.project_id, 'discussion:' || d.id FROM discussions d
        {parents}
        WHERE {no_parent}""", []


def _threads_without_notes() -> tuple[str, list[Any]]:
    return """
        SELECT d.project_id AS pid, d.id AS ref FROM discussions d
        LEFT JOIN notes n ON n.discussion_id = d.id
        GROUP BY d.project_id, d.id, d.individual_note, d.note_count
        HAVING count(n.id) = 0 OR count(n.id) <> d.note_count OR (d.individual_note AND count(n.id) <> 1)""", []


def _dates_out_of_order() -> tuple[str, list[Any]]:
    return "SELECT project_id AS pid, id AS ref FROM discussions WHERE first_note_at > last_note_at", []


def _mrs_without_files() -> tuple[str, list[Any]]:
    return """
        SELECT m.project_id AS pid, m.reference AS ref FROM merge_requests m
        WHERE NOT EXISTS (SELECT 1 FROM raw_payloads f WHERE f.resource_type = 'merge_request_diffs'
                          AND f.parent_id = m.id AND f.deleted_at IS NULL)""", []


def _unresolved_references() -> tuple[str, list[Any]]:
    sigils = " ".join("WHEN ? THEN ?" for _ in kinds.ITEM_KINDS)
    missing = "".join(f"""
          AND NOT EXISTS (SELECT 1 FROM {k.table} t WHERE r.target_type = ?
                          AND t.project_id = r.target_project_id AND t.iid = r.target_iid)""" for k in kinds.ITEM_KINDS)
    sql = f"""
        SELECT r.project_id AS pid, r.target_path || CASE r.target_type {sigils} END || r.target_iid
               || ' (' || r.text || ')' AS ref
        FROM item_references r
        WHERE NOT r.external{missing}"""
    return sql, [*(v for k in kinds.ITEM_KINDS for v in (k.name, k.sigil)), *(k.name for k in kinds.ITEM_KINDS)]


def _system_notes_in_documents() -> tuple[str, list[Any]]:
    return """
        SELECT d.project_id AS pid, d.id AS ref FROM documents d
        WHERE d.source_type = 'discussion'
          AND NOT EXISTS (SELECT 1 FROM discussions t WHERE t.id = d.source_id)
        UNION ALL
        SELECT d.project_id, d.id FROM documents d JOIN system_notes s ON s.discussion_id = d.source_id
        WHERE d.source_type = 'discussion' AND s.body <> ''
          AND contains(d.content_text, '@' || coalesce(s.author_username, 'unknown') || ' ('
                       || coalesce(strftime(s.created_at, '%Y-%m-%d'), 'unknown date') || '):' || chr(10) || s.body)""", []


# The violation queries behind RULES (cursors_within_data is read in Python: `_cursors`).
VIOLATIONS: dict[str, tuple[Violations, str]] = {
    "items_have_raw_payloads": (_items_without_raw, "every issue and MR has its live raw payload"),
    "no_system_notes": (_system_notes_among_notes, "no system note is among the user notes"),
    "no_orphan_notes_or_threads": (_orphans, "every note belongs to a thread and every thread to an issue or MR"),
    "threads_have_their_notes": (_threads_without_notes,
                                 "every thread has at least one note, and a standalone note exactly one"),
    "note_dates_ordered": (_dates_out_of_order, "every thread's first_note_at is at or before its last_note_at"),
    "mrs_have_file_lists": (_mrs_without_files, "every merge request has its file list (a sync fetches missing ones)"),
    "references_resolved": (_unresolved_references, "every link's target is in the store or marked external "
                            "(a miss: a typo'd number, or an item the token cannot see)"),
    "no_system_note_in_documents": (_system_notes_in_documents, "no system note reaches a search document"),
}


def _rule(name: str, doc: str) -> Callable[[duckdb.DuckDBPyConnection, int | None], Outcome]:
    """Rule `name` scoped to one project (or, with None, the whole store)."""
    violations, description = VIOLATIONS[name]

    def rule(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
        sql, params = violations()
        if project_id is None:
            return _everywhere(con, sql, params, description)
        return _grouped(con, sql, params, description, [project_id])[project_id]

    rule.__doc__ = doc
    return rule


items_have_raw_payloads = _rule("items_have_raw_payloads", "Every issue and merge request has its live raw payload.")
no_system_notes = _rule("no_system_notes", "No system note is among the user notes (they have their own table, system_notes).")
no_orphans = _rule("no_orphan_notes_or_threads", "Every note belongs to a thread, every thread to an issue or MR.")
threads_have_their_notes = _rule(
    "threads_have_their_notes", "Every thread has at least one note; a standalone (individual_note) thread exactly one.")
note_dates_ordered = _rule("note_dates_ordered", "Every thread's first_note_at is at or before its last_note_at.")


def cursors_within_data(con: duckdb.DuckDBPyConnection, project_id: int | None) -> Outcome:
    """Every sync cursor is at or before the newest updated_at stored for its resource."""
    if project_id is None:
        return _cursors(con, None)[None]
    return _cursors(con, [project_id])[project_id]


def _cursors(con: duckdb.DuckDBPyConnection, project_ids: Sequence[int] | None) -> dict[Any, Outcome]:
    """The cursor rule per project (None: one outcome for the whole store, keyed None)."""
    where = f" WHERE c.project_id IN ({', '.join(str(int(p)) for p in project_ids)})" if project_ids else ""
    rows = con.execute(f"""
        SELECT c.project_id, c.resource_type, c.updated_at_cursor,
               (SELECT max(r.updated_at) FROM raw_payloads r WHERE r.project_id = c.project_id
                  AND r.resource_type = c.resource_type)
        FROM sync_cursors c{where}
    """).fetchall() if project_ids is None or project_ids else []
    bad: dict[Any, list[str]] = {pid: [] for pid in (project_ids if project_ids is not None else [None])}
    for p, r, c, m in rows:
        if m is None or (parse_time(c) or m) > m:
            bad[p if project_ids is not None else None].append(f"{p}/{r}: cursor {c} > newest {m}")
    return {pid: Outcome(not lines, len(lines), "every cursor is at or before the newest updated_at stored"
                         if not lines else f"{len(lines)} cursor(s) ahead of the stored data", lines[:5])
            for pid, lines in bad.items()}


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


mrs_have_file_lists = _rule("mrs_have_file_lists", "Every merge request in the store has its file list (fetched from GitLab's /diffs).")
references_resolved = _rule("references_resolved", "Every link's target is in the store, or in a project this store does not sync (external).")
no_system_note_in_documents = _rule(
    "no_system_note_in_documents", "No system note reaches a search document: no document of a thread without user notes, and\n"
    "    no thread document holding a system note as one of its notes.")


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
def evaluate_many(con: duckdb.DuckDBPyConnection, name: str, project_ids: Sequence[int]) -> dict[int, Outcome]:
    """Rule `name` for each of `project_ids` in one pass over the store (grouped by project): the
    outcome each would get from `RULES[name][0](con, project_id)`."""
    if name == "cursors_within_data":
        return _cursors(con, list(project_ids)) if project_ids else {}
    violations, description = VIOLATIONS[name]
    sql, params = violations()
    return _grouped(con, sql, params, description, list(project_ids))


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
