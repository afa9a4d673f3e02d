"""What an agent may see of the store, enforced under the queries rather than after them.

The graph tools and the items' links run the CLI's own functions (graph/queries.py), which read
every row. For the server they read through a lens (store/reader.py's Lens): views named like the
tables they shadow (`issues`, `notes`, `system_notes`, `discussions`, `item_references`,
`mentions`, `user_items`, `user_item_notes`, `path_touches`, `raw_payloads`), first on the read's
search path, so the same SQL reads only what the config lets agents see. Confidential issues go
with their threads, notes, system notes, payloads, the links and mentions written in them and the
links to them; internal notes go with their threads and the links and mentions written in them (a
stored thread payload keeps its other notes, as GitLab shows a thread to a guest).

What is hidden is listed in small tables (the hidden issues; the hidden notes with their threads;
the hidden threads and links, by rowid), built once per version of the store rather than inside
every query that scans a view: deriving them costs ~10 ms at 100K documents, a hash lookup in
them next to nothing.

The tables read by user or by item (`user_items`, `mentions`, `discussions`: COPIED) are not
views but copies of their visible rows, made with those lists once per version of the store and
sorted by user (the threads by MR, then issue): a query reading one user's rows then skips the
others' blocks by their min/max instead of scanning them all and joining each row with a hidden
list. At 100K documents that took ~3.3 ms (~15 %) off `me` in process, for ~100 ms more
to build the lens and ~32 MB of memory while it is kept (docs/ARCHITECTURE.md).
"""

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.store.reader import ALIAS, Lens

_STORE = f"{ALIAS}.main"
HIDDEN_NOTES = "gk_hidden_notes"  # raw_payloads' extra column under a lens: the internal notes cut from a thread
PATH_TABLE = "path_touches"  # graph/path_rows.py: keyed by MR, flagged internal (the note, its thread)
PEOPLE_TABLES = ("user_items", "user_item_notes")  # graph/people_rows.py: keyed by item, flagged internal
# What the hidden lens copies rather than views (the module's docstring), and the order it keeps.
COPIED = {"user_items": "username, item_type, item_id", "mentions": "username, created_at",
          "discussions": "merge_request_id, issue_id"}


def hidden_lens(*, include_confidential: bool, include_internal: bool) -> Lens | None:
    """The lens that hides what the config leaves out (None: nothing is hidden)."""
    if include_confidential and include_internal:
        return None
    schema = f"gk_visible_{'c' if include_confidential else ''}{'i' if include_internal else ''}".rstrip("_")
    at = f"memory.{schema}"
    confidential = "false" if include_confidential else "coalesce(confidential, false)"
    hidden_note = " OR ".join(
        ([] if include_internal else ["coalesce(internal, false)"])
        + ([] if include_confidential else [f"(noteable_type = '{kinds.ISSUE.noteable_type}' AND noteable_id IN (SELECT id FROM {at}.hidden_issues))"]))
    # A row of an item (the tables keyed by item_type, item_id) not of a hidden issue.
    of_visible_item = f"NOT (item_type = '{kinds.ISSUE.name}' AND item_id IN (SELECT id FROM {at}.hidden_issues))"
    people = of_visible_item + ("" if include_internal else " AND NOT internal")
    statements = (
        f"CREATE OR REPLACE TABLE {at}.hidden_issues AS "
        f"SELECT i.id, i.iid, i.project_id, lower(p.path_with_namespace) AS path, p.path_with_namespace AS project "
        f"FROM {_STORE}.issues i "
        f"JOIN {_STORE}.projects p ON p.id = i.project_id WHERE {confidential}",
        f"CREATE OR REPLACE TABLE {at}.hidden_notes AS "
        f"SELECT id, discussion_id, noteable_type, noteable_id, false AS system FROM {_STORE}.notes "
        f"WHERE {hidden_note} UNION ALL SELECT id, discussion_id, noteable_type, noteable_id, true AS system "
        f"FROM {_STORE}.system_notes WHERE {hidden_note}",
        f"CREATE OR REPLACE VIEW {at}.issues AS SELECT * FROM {_STORE}.issues WHERE NOT {confidential}",
        f"CREATE OR REPLACE VIEW {at}.notes AS SELECT * FROM {_STORE}.notes "
        f"WHERE id NOT IN (SELECT id FROM {at}.hidden_notes)",
        f"CREATE OR REPLACE VIEW {at}.system_notes AS SELECT * FROM {_STORE}.system_notes "
        f"WHERE id NOT IN (SELECT id FROM {at}.hidden_notes)",
        # GitLab makes a whole thread internal (its replies are internal too): a thread holding an
        # internal note is an internal thread, as is every thread of a confidential issue.
        # Listed by rowid, as the hidden links are: the view then costs an integer lookup per thread
        # (~2 ms a scan at 100K documents), not a text one (~8 ms).
        f"CREATE OR REPLACE TABLE {at}.hidden_discussions AS SELECT d.rowid AS row FROM {_STORE}.discussions d "
        f"WHERE d.id IN (SELECT discussion_id FROM {at}.hidden_notes) "
        f"OR (d.noteable_type = '{kinds.ISSUE.noteable_type}' AND d.{kinds.ISSUE.thread_column} IN (SELECT id FROM {at}.hidden_issues))",
        _copy(at, "discussions", f"rowid NOT IN (SELECT row FROM {at}.hidden_discussions)"),
        # A link written in a hidden note or a confidential issue goes, and so does a link to a
        # confidential issue (rather than showing as an item not in the store). The hidden links
        # are listed by rowid, which holds until the store changes and the list is built again.
        f"CREATE OR REPLACE TABLE {at}.hidden_references AS SELECT r.rowid AS row FROM {_STORE}.item_references r "
        f"WHERE (r.note_id IS NOT NULL AND r.note_id IN (SELECT id FROM {at}.hidden_notes)) "
        f"OR (r.source_type = '{kinds.ISSUE.name}' AND r.source_id IN (SELECT id FROM {at}.hidden_issues)) "
        f"OR (r.target_type = '{kinds.ISSUE.name}' AND EXISTS (SELECT 1 FROM {at}.hidden_issues h WHERE h.iid = r.target_iid "
        "AND (h.project_id = r.target_project_id OR (r.target_project_id IS NULL AND h.path = lower(r.target_path)))))",
        f"CREATE OR REPLACE VIEW {at}.item_references AS SELECT * FROM {_STORE}.item_references "
        f"WHERE rowid NOT IN (SELECT row FROM {at}.hidden_references)",
        # Who is mentioned where (graph/refresh.py): not in a hidden note, nor in a confidential issue.
        _copy(at, "mentions", f"(note_id IS NULL OR note_id NOT IN (SELECT id FROM {at}.hidden_notes)) "
              f"AND {of_visible_item}"),
        # A user's items and the notes on them (graph/people_rows.py): not of a confidential issue,
        # nor (a row of internal notes) where internal notes are hidden, as the notes view hides them.
        *(_copy(at, table, people) if table in COPIED
          else f"CREATE OR REPLACE VIEW {at}.{table} AS SELECT * FROM {_STORE}.{table} WHERE {people}"
          for table in PEOPLE_TABLES),
        # The paths MRs touched (graph/path_rows.py): MRs only, so only internal notes go (a
        # confidential issue has none of these rows): a note's row if it is internal, and the
        # thread it shows if the thread holds one, as the `notes` and `discussions` views hide them.
        f"CREATE OR REPLACE VIEW {at}.{PATH_TABLE} AS SELECT * "
        + ("FROM " if include_internal else
           "REPLACE (CASE WHEN thread_internal THEN NULL ELSE thread END AS thread) FROM ")
        + f"{_STORE}.{PATH_TABLE}" + ("" if include_internal else " WHERE NOT internal"),
        _raw_payloads(at, include_confidential=include_confidential, include_internal=include_internal),
    )
    return Lens(schema, statements)


def _copy(at: str, table: str, visible: str) -> str:
    """The statement making the lens's copy of `table`: its rows where `visible`, in COPIED's order."""
    return f"CREATE OR REPLACE TABLE {at}.{table} AS SELECT * FROM {_STORE}.{table} WHERE {visible} ORDER BY {COPIED[table]}"


def _raw_payloads(at: str, *, include_confidential: bool, include_internal: bool) -> str:
    """GitLab's payloads as stored, less a confidential issue's and its threads', and with each
    thread's internal notes cut out of its JSON by the payload's own flag (GitLab's `internal`, or
    `confidential` before 15.x), so a thread synced but not yet normalized hides them too. How many
    were cut is the extra column HIDDEN_NOTES."""
    internal = "coalesce((x->>'internal')::BOOLEAN, (x->>'confidential')::BOOLEAN, false)"
    notes = "json_extract(json, '$.notes[*]')"
    kept = f"list_filter({notes}, lambda x: NOT {internal})"
    json = "json" if include_internal else \
        f"CASE WHEN resource_type = 'discussion' THEN json_merge_patch(json, json_object('notes', to_json({kept}))) " \
        "ELSE json END"
    cut = "0" if include_internal else \
        f"CASE WHEN resource_type = 'discussion' THEN coalesce(len({notes}) - len({kept}), 0) ELSE 0 END"
    hidden = "false" if include_confidential else (
        f"(resource_type = '{kinds.ISSUE.name}' AND gitlab_key IN (SELECT id::TEXT FROM {at}.hidden_issues)) OR "
        f"(resource_type = '{kinds.DISCUSSION}' AND parent_type = '{kinds.ISSUE.name}' AND parent_id IN (SELECT id FROM {at}.hidden_issues))")
    return (f"CREATE OR REPLACE VIEW {at}.raw_payloads AS SELECT * REPLACE ({json} AS json), {cut} AS {HIDDEN_NOTES} "
            f"FROM {_STORE}.raw_payloads WHERE NOT ({hidden})")


def confidential_lens() -> Lens:
    """Only the confidential issues, as `issues`: through it a reference resolves when, and only
    when, it names one, so a tool can say why the hidden lens found nothing without its answers
    ever reading a confidential row."""
    at = "memory.gk_confidential"
    return Lens("gk_confidential", (
        f"CREATE OR REPLACE VIEW {at}.issues AS SELECT * FROM {_STORE}.issues WHERE coalesce(confidential, false)",))


def hidden_issue_projects(con: duckdb.DuckDBPyConnection, lens: Lens | None, iid: int,
                          project_id: int | None) -> list[str]:
    """The projects of the issues `lens` hides with this iid (in `project_id` when given), from
    the lens's own list: what a refusal names (a viewer's lens names none: GitLab answers 404)."""
    if lens is None or lens.viewer:
        return []
    where, params = (" AND project_id = ?", [project_id]) if project_id is not None else ("", [])
    return [r[0] for r in con.execute(f"SELECT project FROM memory.{lens.schema}.hidden_issues WHERE iid = ?{where} "
                                      "ORDER BY 1", [iid, *params]).fetchall()]


def hidden_note_count(con: duckdb.DuckDBPyConnection, lens: Lens | None, noteable_type: str, noteable_id: int) -> int:
    """How many of an item's notes (system notes aside) `lens` hides, from the lens's own list (a
    viewer's lens tells none: GitLab does not show a guest that internal notes exist)."""
    if lens is None or lens.viewer:
        return 0
    return int(one_row(con.execute(f"SELECT count(*) FROM memory.{lens.schema}.hidden_notes WHERE NOT system "
                                   "AND noteable_type = ? AND noteable_id = ?", [noteable_type, noteable_id]))[0])


def hidden_notes_column(lens: Lens | None) -> str:
    """What to select from raw_payloads for the number of internal notes `lens` cut from a thread."""
    return HIDDEN_NOTES if lens is not None and not lens.viewer else "0"
