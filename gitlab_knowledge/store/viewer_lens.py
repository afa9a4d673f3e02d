"""One GitLab user's view of the store, as GitLab decides it, enforced under every query.

A shared MCP server (`[mcp] auth = "gitlab"`) answers each user through `viewer_lens(viewer)`:
views named like the store's tables, first on the read's search path (store/reader.py's Lens), so
the CLI's own SQL reads only what GitLab lets that user read:

- a project they cannot read does not exist: its row, items, threads, notes, system notes,
  payloads, labels, files, documents, sync runs and watermarks are gone, and so is every link
  written elsewhere to one of its items (not even the title shows);
- a confidential issue exists for its author, its assignees, members with at least Planner access
  (`Viewer.sees_confidential`) and admins; for anyone else it goes with its threads, notes, payloads,
  the links written in it and the links to it;
- internal notes (and so their whole thread, as GitLab makes a thread internal) exist only where
  the user sees confidential things: an issue's author or assignee below Planner does not see them
  (GitLab 15.5 restricted them to Reporter+, a Planner-level permission since 17.7);
- a private project's merge requests exist only for members with at least Planner access
  (`Viewer.sees_merge_requests`): for its Guests they go with everything of them (threads, notes,
  changed files, labels, mentions, documents, payloads, the links written in them and to them,
  and the system notes elsewhere that reference one, which GitLab hides as it hides the MR);
- the config's opt-outs (`[mcp] include_confidential/include_internal = false`) still apply on top:
  the operator may keep them from every agent.

An issue a shared server learnt GitLab made confidential since the sync (store/overlay.py, read
from the reader's overlay tables) is hidden by the same rule as a stored confidential one, with
everything that follows it, and the merge requests' documents that carry its title (their
`Closes:` line, written while it was public) go for whom it is hidden. A project whose
confidential check failed is out of sight for whoever does not see its confidential issues: what
flipped there is not known (fail closed).

Any other store table that has a `project_id` column (a kind added later) is shadowed to the
readable projects without being named here. `gitlab_identity` names the viewer: `me` is theirs.

What is hidden is listed in small tables built once per version of the store per viewer (the
readable projects, the hidden issues and notes, the hidden links); the reader keeps a bounded
number of viewers' lenses (store/reader.py). `index_scope` is the same decision in the form both
retrievers push down before their cut (search/filters.py `Filters.scope`).
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store import overlay
from gitlab_knowledge.store.reader import ALIAS, Lens
from gitlab_knowledge.store.visibility import HIDDEN_NOTES, PATH_TABLE, PEOPLE_TABLES
from gitlab_knowledge.viewer import Viewer

_STORE = f"{ALIAS}.main"
# Shadowed by name below; any other table with a project_id column is shadowed generically.
_NAMED = ("projects", "issues", "merge_requests", "labels", "issue_labels", "mr_labels", "discussions", "notes",
          "system_notes", "note_positions", "item_references", "mr_files", "documents", "document_labels",
          "mentions", "raw_payloads", "gitlab_identity", "project_aliases", *PEOPLE_TABLES, PATH_TABLE)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def lens_key(viewer: Viewer, include_confidential: bool, include_internal: bool) -> str:
    """The lens's schema name: one per viewer identity, access map and config opt-outs."""
    text = repr((viewer.user_id, viewer.username, viewer.is_admin, viewer.external,
                 sorted(viewer.access.items()), include_confidential, include_internal,
                 _no_merge_requests(viewer)))
    return "gk_viewer_" + hashlib.sha256(text.encode()).hexdigest()[:20]


def viewer_lens(viewer: Viewer, gitlab_url: str, *, include_confidential: bool, include_internal: bool) -> Lens:
    """The lens through which `viewer` reads the store (see the module docstring)."""
    schema = lens_key(viewer, include_confidential, include_internal)
    at = f"memory.{schema}"
    if viewer.is_admin:
        readable = f"SELECT id AS project_id, true AS trusted FROM {_STORE}.projects"
    elif viewer.access:
        rows = ", ".join(f"({int(pid)}, {'true' if viewer.sees_confidential(int(pid)) else 'false'})"
                         for pid in sorted(viewer.access))
        readable = f"SELECT * FROM (VALUES {rows}) v(project_id, trusted)"
    else:
        readable = "SELECT NULL::BIGINT AS project_id, NULL::BOOLEAN AS trusted WHERE false"

    def build(con: duckdb.DuckDBPyConnection) -> None:
        for statement in overlay.ENSURE:
            con.execute(statement)
        con.execute(f"CREATE OR REPLACE TABLE {at}.readable AS {readable}")
        for statement in _hidden_merge_requests(at, viewer):
            con.execute(statement)
        # Fail closed: where the last confidential check failed, only those who see every
        # confidential issue still read the project.
        con.execute(f"DELETE FROM {at}.readable WHERE NOT trusted AND project_id IN "
                    f"(SELECT project_id FROM {overlay.UNCHECKED})")
        # Every stored project readable (an admin, a public GitLab's guest): no project predicate
        # in the views, which then cost what the config's lens costs.
        every = not con.execute(f"SELECT 1 FROM {_STORE}.projects WHERE id NOT IN "
                                f"(SELECT project_id FROM {at}.readable) LIMIT 1").fetchone()
        mrs = bool(_no_merge_requests(viewer))
        for statement in _statements(at, viewer, gitlab_url, every, include_confidential, include_internal, mrs):
            con.execute(statement)
        _shadow_the_rest(at, "true" if every else f"project_id IN (SELECT project_id FROM {at}.readable)")(con)

    return Lens(schema, (build,), viewer=True)


def _statements(at: str, viewer: Viewer, gitlab_url: str, every: bool, include_confidential: bool,
                include_internal: bool, mrs: bool = False) -> list[str]:
    def reads(alias: str = "") -> str:
        return "true" if every else f"{alias}project_id IN (SELECT project_id FROM {at}.readable)"

    def within(column: str, table: str) -> str:
        """A row keyed by `column` to a `table` row of a readable project."""
        return "true" if every else f"{column} IN (SELECT id FROM {_STORE}.{table} WHERE {reads()})"

    def mr_shown(column: str) -> str:
        """`column` (a merge request's id) is not one of the merge requests hidden from the viewer."""
        return f"{column} NOT IN (SELECT id FROM {at}.hidden_merge_requests)" if mrs else "true"

    user = _quote(viewer.username.lower())
    # A confidential issue hidden from this viewer (within a project they read).
    shown_confidential = "false" if not include_confidential else (
        f"(i.project_id IN (SELECT project_id FROM {at}.readable WHERE trusted) OR lower(i.author_username) = {user} "
        f"OR list_contains(list_transform(coalesce(i.assignees, []), lambda x: lower(x)), {user}))")
    internal_hidden = "coalesce(internal, false)" if not include_internal else \
        f"(coalesce(internal, false) AND project_id NOT IN (SELECT project_id FROM {at}.readable WHERE trusted))"
    issue = kinds.ISSUE
    hidden_note = (f"{reads()} AND ({internal_hidden} OR (noteable_type = '{issue.noteable_type}' "
                   f"AND noteable_id IN (SELECT id FROM {at}.hidden_issues)))")
    # Paths of synced projects this viewer does not read: a link naming one by path goes too.
    unread_paths = (f"SELECT lower(path_with_namespace) FROM {_STORE}.projects "
                    f"WHERE id NOT IN (SELECT project_id FROM {at}.readable)")
    statements: list[str] = [
        f"CREATE OR REPLACE TABLE {at}.hidden_issues AS "
        f"SELECT i.id, i.iid, i.project_id, lower(p.path_with_namespace) AS path, p.path_with_namespace AS project "
        f"FROM {_STORE}.issues i JOIN {_STORE}.projects p ON p.id = i.project_id "
        f"WHERE {reads('i.')} AND (coalesce(i.confidential, false) OR i.id IN (SELECT id FROM {overlay.ISSUES})) "
        f"AND NOT {shown_confidential}",
        f"CREATE OR REPLACE TABLE {at}.hidden_notes AS "
        f"SELECT id, discussion_id, noteable_type, noteable_id, false AS system FROM {_STORE}.notes WHERE {hidden_note} "
        f"UNION ALL SELECT id, discussion_id, noteable_type, noteable_id, true FROM {_STORE}.system_notes "
        f"WHERE {hidden_note}",
        *(_merge_request_notes(at) if mrs else []),
        f"CREATE OR REPLACE VIEW {at}.projects AS SELECT * FROM {_STORE}.projects "
        f"WHERE id IN (SELECT project_id FROM {at}.readable)",
        f"CREATE OR REPLACE VIEW {at}.issues AS SELECT * FROM {_STORE}.issues "
        f"WHERE {reads()} AND id NOT IN (SELECT id FROM {at}.hidden_issues)",
        f"CREATE OR REPLACE VIEW {at}.merge_requests AS SELECT * FROM {_STORE}.merge_requests WHERE {reads()} "
        f"AND {mr_shown('id')}",
        f"CREATE OR REPLACE VIEW {at}.labels AS SELECT * FROM {_STORE}.labels WHERE {reads()}",
        # The junctions and positions by the hidden lists (small), the project only when some
        # project is not read: a view over the item views would scan every item per query.
        f"CREATE OR REPLACE VIEW {at}.issue_labels AS SELECT * FROM {_STORE}.issue_labels "
        f"WHERE issue_id NOT IN (SELECT id FROM {at}.hidden_issues) AND {within('issue_id', 'issues')}",
        f"CREATE OR REPLACE VIEW {at}.mr_labels AS SELECT * FROM {_STORE}.mr_labels "
        f"WHERE {within('merge_request_id', 'merge_requests')} AND {mr_shown('merge_request_id')}",
        f"CREATE OR REPLACE VIEW {at}.notes AS SELECT * FROM {_STORE}.notes "
        f"WHERE {reads()} AND id NOT IN (SELECT id FROM {at}.hidden_notes)",
        f"CREATE OR REPLACE VIEW {at}.system_notes AS SELECT * FROM {_STORE}.system_notes "
        f"WHERE {reads()} AND id NOT IN (SELECT id FROM {at}.hidden_notes)",
        f"CREATE OR REPLACE VIEW {at}.note_positions AS SELECT * FROM {_STORE}.note_positions "
        f"WHERE note_id NOT IN (SELECT id FROM {at}.hidden_notes) AND {within('note_id', 'notes')}",
        # A thread holding an internal note is an internal thread, as is every thread of a hidden issue.
        f"CREATE OR REPLACE VIEW {at}.discussions AS SELECT * FROM {_STORE}.discussions "
        f"WHERE {reads()} AND id NOT IN (SELECT discussion_id FROM {at}.hidden_notes) "
        f"AND NOT (noteable_type = '{issue.noteable_type}' AND {issue.thread_column} IN (SELECT id FROM {at}.hidden_issues))",
        # Links written in a hidden note or issue, to a hidden issue, or to an item of a synced
        # project the viewer does not read (by id, or by a path naming one), listed by rowid.
        f"CREATE OR REPLACE TABLE {at}.hidden_references AS SELECT r.rowid AS row FROM {_STORE}.item_references r "
        f"WHERE {reads('r.')} AND ((r.note_id IS NOT NULL AND r.note_id IN (SELECT id FROM {at}.hidden_notes)) "
        f"OR (r.source_type = '{issue.name}' AND r.source_id IN (SELECT id FROM {at}.hidden_issues)) "
        f"OR (r.target_project_id IS NOT NULL AND r.target_project_id NOT IN (SELECT project_id FROM {at}.readable)) "
        f"OR (r.target_project_id IS NULL AND lower(r.target_path) IN ({unread_paths})) "
        f"OR (r.target_type = '{issue.name}' AND EXISTS (SELECT 1 FROM {at}.hidden_issues h WHERE h.iid = r.target_iid "
        "AND (h.project_id = r.target_project_id OR (r.target_project_id IS NULL AND h.path = lower(r.target_path))))))",
        *(_merge_request_references(at) if mrs else []),
        f"CREATE OR REPLACE VIEW {at}.item_references AS SELECT * FROM {_STORE}.item_references "
        f"WHERE {reads()} AND rowid NOT IN (SELECT row FROM {at}.hidden_references)",
        f"CREATE OR REPLACE VIEW {at}.mr_files AS SELECT * FROM {_STORE}.mr_files WHERE {reads()} "
        f"AND {mr_shown('merge_request_id')}",
        # Who is mentioned where (graph/refresh.py): not in a hidden note, nor in a hidden issue.
        f"CREATE OR REPLACE VIEW {at}.mentions AS SELECT * FROM {_STORE}.mentions "
        f"WHERE {reads()} AND (note_id IS NULL OR note_id NOT IN (SELECT id FROM {at}.hidden_notes)) "
        f"AND NOT (item_type = '{issue.name}' AND item_id IN (SELECT id FROM {at}.hidden_issues)) "
        f"AND (item_type <> '{kinds.MERGE_REQUEST.name}' OR {mr_shown('item_id')})",
        # A user's items and the notes on them (graph/people_rows.py): as the items' and notes'
        # views hide them (the item hidden, or a row of internal notes the viewer may not read).
        *(f"CREATE OR REPLACE VIEW {at}.{table} AS SELECT * FROM {_STORE}.{table} "
          f"WHERE {reads()} AND NOT (item_type = '{issue.name}' AND item_id IN (SELECT id FROM {at}.hidden_issues)) "
          f"AND (item_type <> '{kinds.MERGE_REQUEST.name}' OR {mr_shown('item_id')}) AND NOT {internal_hidden}"
          for table in PEOPLE_TABLES),
        # The paths MRs touched (graph/path_rows.py): a hidden MR's rows, a hidden note's, and the
        # thread a row shows when the `discussions` view hides it (the note may still count).
        f"CREATE OR REPLACE VIEW {at}.{PATH_TABLE} AS SELECT * REPLACE (CASE WHEN discussion_id IN "
        f"(SELECT discussion_id FROM {at}.hidden_notes) THEN NULL ELSE thread END AS thread) "
        f"FROM {_STORE}.{PATH_TABLE} WHERE {reads()} AND {mr_shown('merge_request_id')} "
        f"AND (note_id IS NULL OR note_id NOT IN (SELECT id FROM {at}.hidden_notes))",
        f"CREATE OR REPLACE TABLE {at}.hidden_documents AS SELECT id FROM {_STORE}.documents "
        f"WHERE (parent_type = '{issue.name}' AND parent_id IN (SELECT id FROM {at}.hidden_issues)) "
        f"OR (source_type = '{kinds.DISCUSSION}' AND source_id IN (SELECT discussion_id FROM {at}.hidden_notes)) "
        f"OR (source_type = '{kinds.MERGE_REQUEST.name}' AND parent_id IN ({_closers_of_flipped(at)}))",
        *([f"INSERT INTO {at}.hidden_documents SELECT id FROM {_STORE}.documents WHERE parent_type = "
           f"'{kinds.MERGE_REQUEST.name}' AND parent_id IN (SELECT id FROM {at}.hidden_merge_requests)"] if mrs else []),
        f"CREATE OR REPLACE VIEW {at}.documents AS SELECT * FROM {_STORE}.documents "
        f"WHERE {reads()} AND id NOT IN (SELECT id FROM {at}.hidden_documents)",
        f"CREATE OR REPLACE VIEW {at}.document_labels AS SELECT * FROM {_STORE}.document_labels "
        f"WHERE document_id NOT IN (SELECT id FROM {at}.hidden_documents) AND {within('document_id', 'documents')}",
        _raw_payloads(at, reads(), internal_hidden, mrs),
        # `me` without a user is the viewer, not the token the sync used.
        f"CREATE OR REPLACE VIEW {at}.gitlab_identity AS SELECT {_quote(gitlab_url)} AS gitlab_url, "
        f"{int(viewer.user_id)}::BIGINT AS user_id, {_quote(viewer.username)} AS username, NULL::TEXT AS name, "
        "now()::TIMESTAMP AS recorded_at",
        f"CREATE OR REPLACE VIEW {at}.project_aliases AS SELECT * FROM {_STORE}.project_aliases "
        f"WHERE project_id IS NULL OR {reads()} OR project_id NOT IN (SELECT id FROM {_STORE}.projects)",
    ]
    return statements


def _no_merge_requests(viewer: Viewer) -> tuple[int, ...]:
    """The readable projects whose merge requests the viewer does not see (a private project's Guest)."""
    return tuple(sorted(pid for pid in viewer.access if not viewer.sees_merge_requests(int(pid))))


def _hidden_merge_requests(at: str, viewer: Viewer) -> list[str]:
    """The projects whose merge requests are hidden from the viewer, and those merge requests (by
    id, and by iid and path for the links that name one)."""
    ids = _no_merge_requests(viewer)
    projects = (f"SELECT * FROM (VALUES {', '.join(f'({int(p)})' for p in ids)}) v(project_id)" if ids
                else "SELECT NULL::BIGINT AS project_id WHERE false")
    return [f"CREATE OR REPLACE TABLE {at}.merge_requests_hidden_in AS {projects}",
            f"CREATE OR REPLACE TABLE {at}.hidden_merge_requests AS SELECT m.id, m.iid, m.project_id, "
            f"lower(p.path_with_namespace) AS path FROM {_STORE}.merge_requests m JOIN {_STORE}.projects p "
            f"ON p.id = m.project_id WHERE m.project_id IN (SELECT project_id FROM {at}.merge_requests_hidden_in)"]


def _to_hidden_merge_request(at: str, r: str = "r") -> str:
    """The link `r` names a merge request hidden from the viewer (by project id, or by path)."""
    return (f"({r}.target_type = '{kinds.MERGE_REQUEST.name}' AND EXISTS (SELECT 1 FROM {at}.hidden_merge_requests h "
            f"WHERE h.iid = {r}.target_iid AND (h.project_id = {r}.target_project_id "
            f"OR ({r}.target_project_id IS NULL AND h.path = lower({r}.target_path)))))")


def _merge_request_notes(at: str) -> list[str]:
    """Into the hidden notes: every note and system note of a hidden merge request, and every system
    note elsewhere that links to one ("mentioned in merge request !12", "closed via merge request
    !12"): GitLab shows a system note with references only when the reader sees all of them."""
    mr = kinds.MERGE_REQUEST
    of_hidden = f"noteable_type = '{mr.noteable_type}' AND noteable_id IN (SELECT id FROM {at}.hidden_merge_requests)"
    return [f"INSERT INTO {at}.hidden_notes SELECT id, discussion_id, noteable_type, noteable_id, false "
            f"FROM {_STORE}.notes WHERE {of_hidden}",
            f"INSERT INTO {at}.hidden_notes SELECT id, discussion_id, noteable_type, noteable_id, true "
            f"FROM {_STORE}.system_notes WHERE ({of_hidden}) OR id IN (SELECT r.note_id FROM {_STORE}.item_references r "
            f"WHERE r.found_in = 'system_note' AND r.note_id IS NOT NULL AND {_to_hidden_merge_request(at)})"]


def _merge_request_references(at: str) -> list[str]:
    """Into the hidden links: those written in a hidden merge request, and those naming one."""
    return [f"INSERT INTO {at}.hidden_references SELECT r.rowid FROM {_STORE}.item_references r "
            f"WHERE (r.source_type = '{kinds.MERGE_REQUEST.name}' AND r.source_id IN "
            f"(SELECT id FROM {at}.hidden_merge_requests)) OR {_to_hidden_merge_request(at)}"]


def _closers_of_flipped(at: str) -> str:
    """The merge requests whose document may name, by title, an issue hidden from the viewer that
    was public when the documents were built (in the overlay, or its own document not flagged
    confidential yet): the MR's `Closes:` line carries the title (documents/refresh.py
    `_closed_issues`, own project's issues only) until the documents layer rebuilds it."""
    issue = kinds.ISSUE.name
    built_public = (f"SELECT parent_id FROM {_STORE}.documents WHERE parent_type = '{issue}' AND source_type = "
                    f"'{issue}' AND NOT coalesce(confidential, false)")
    return (f"SELECT r.source_id FROM {_STORE}.item_references r JOIN {at}.hidden_issues h "
            "ON h.project_id = r.target_project_id AND h.iid = r.target_iid AND h.project_id = r.project_id "
            f"WHERE r.source_type = '{kinds.MERGE_REQUEST.name}' AND r.kind = 'closes' "
            f"AND (h.id IN (SELECT id FROM {overlay.ISSUES}) OR h.id IN ({built_public}))")


def _raw_payloads(at: str, reads: str, internal_hidden: str, mrs: bool = False) -> str:
    """GitLab's payloads of the readable projects, less a hidden issue's and its threads', with
    the internal notes the viewer may not read cut from each thread's JSON by the payload's own
    flag (GitLab's `internal`, or `confidential` before 15.x); how many: HIDDEN_NOTES."""
    flag = "coalesce((x->>'internal')::BOOLEAN, (x->>'confidential')::BOOLEAN, false)"
    notes = "json_extract(json, '$.notes[*]')"
    kept = f"list_filter({notes}, lambda x: NOT {flag})"
    cuts = f"resource_type = '{kinds.DISCUSSION}' AND {internal_hidden.replace('coalesce(internal, false)', 'true')}"
    hidden = (f"(resource_type = '{kinds.ISSUE.name}' AND gitlab_key IN (SELECT id::TEXT FROM {at}.hidden_issues)) OR "
              f"(resource_type = '{kinds.DISCUSSION}' AND parent_type = '{kinds.ISSUE.name}' "
              f"AND parent_id IN (SELECT id FROM {at}.hidden_issues))")
    if mrs:  # a hidden MR's own payload, its threads' and file list's; a hidden system note's thread
        hidden += (f" OR (resource_type = '{kinds.MERGE_REQUEST.name}' AND gitlab_key IN "
                   f"(SELECT id::TEXT FROM {at}.hidden_merge_requests)) OR coalesce(parent_type = '{kinds.MERGE_REQUEST.name}' "
                   f"AND parent_id IN (SELECT id FROM {at}.hidden_merge_requests), false) OR (resource_type = "
                   f"'{kinds.DISCUSSION}' AND gitlab_key IN (SELECT discussion_id FROM {at}.hidden_notes WHERE system "
                   f"AND noteable_type <> '{kinds.MERGE_REQUEST.noteable_type}'))")
    return (f"CREATE OR REPLACE VIEW {at}.raw_payloads AS SELECT * REPLACE (CASE WHEN {cuts} THEN "
            f"json_merge_patch(json, json_object('notes', to_json({kept}))) ELSE json END AS json), "
            f"CASE WHEN {cuts} THEN coalesce(len({notes}) - len({kept}), 0) ELSE 0 END AS {HIDDEN_NOTES} "
            f"FROM {_STORE}.raw_payloads WHERE {reads} AND NOT ({hidden})")


def _shadow_the_rest(at: str, reads: str) -> Callable[[duckdb.DuckDBPyConnection], None]:
    """Every other store table with a project_id column, shadowed to the readable projects."""
    def run(con: duckdb.DuckDBPyConnection) -> None:
        tables = [r[0] for r in con.execute(
            "SELECT DISTINCT table_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main' "
            "AND column_name = 'project_id'", [ALIAS]).fetchall()]
        for table in sorted(set(tables) - set(_NAMED)):
            con.execute(f'CREATE OR REPLACE VIEW {at}."{table}" AS SELECT * FROM {_STORE}."{table}" WHERE {reads}')
    return run


@dataclass(frozen=True)
class IndexScope:
    """The viewer's view in the form both indexes filter on: documents of `projects` (paths), less,
    in the `guarded` ones (where they do not see confidential things), internal threads and
    confidential documents other than `allowed` (those of the confidential issues they authored or
    are assigned). `every_project`: they read every project the store holds (the project clause
    can go); `all_guarded`: `guarded` is all of `projects` (the guard needs no project clause).
    `denied`: documents the index does not flag but the lens hides (a hidden issue's documents
    built while it was public, as after a flip the store has not seen yet, store/overlay.py, and
    the MR documents carrying its title).
    Pushed down before the retrievers' cut (search/filters.py `Filters.scope`)."""

    projects: frozenset[str]
    guarded: frozenset[str]
    allowed: frozenset[str]
    every_project: bool = False
    all_guarded: bool = False
    # Projects (paths) whose merge requests the viewer does not see: their MR documents (the MR's
    # own and its threads') are out.
    no_merge_requests: frozenset[str] = frozenset()
    denied: frozenset[str] = frozenset()


def index_scope(con: duckdb.DuckDBPyConnection, lens: Lens) -> IndexScope:
    """The scope of the viewer whose `lens` `con` reads through (an admin's: None is theirs)."""
    at = f"memory.{lens.schema}"
    readable = {r[0] for r in con.execute(f"SELECT project_id FROM {at}.readable").fetchall()}
    trusted = {r[0] for r in con.execute(f"SELECT project_id FROM {at}.readable WHERE trusted").fetchall()}
    # The paths the indexes carry (a document's project path as built) and the projects' own.
    paths: dict[str, set[int]] = {}
    for path, pid in con.execute(f"SELECT DISTINCT project_path, project_id FROM {_STORE}.documents UNION "
                                 f"SELECT path_with_namespace, id FROM {_STORE}.projects").fetchall():
        paths.setdefault(path, set()).add(pid)
    # A path some unreadable project also had is not the viewer's: over-filter rather than leak.
    projects = frozenset(p for p, ids in paths.items() if ids <= readable)
    guarded = frozenset(p for p in projects if not paths[p] <= trusted)
    allowed = frozenset(r[0] for r in con.execute(
        f"SELECT d.id FROM documents d JOIN issues i ON d.parent_type = '{kinds.ISSUE.name}' AND d.parent_id = i.id "
        f"WHERE coalesce(i.confidential, false) AND i.project_id NOT IN (SELECT project_id FROM {at}.readable "
        "WHERE trusted)").fetchall())
    # A hidden issue's documents not flagged confidential (built while it was public: an overlay
    # flip, or a flag the sync stored before the documents layer ran), and the MRs' that carry it.
    denied = frozenset(r[0] for r in con.execute(
        f"SELECT id FROM {_STORE}.documents WHERE id IN (SELECT id FROM {at}.hidden_documents) "
        f"AND ((parent_type = '{kinds.ISSUE.name}' AND parent_id IN (SELECT id FROM {at}.hidden_issues) "
        f"AND NOT coalesce(confidential, false)) OR (source_type = '{kinds.MERGE_REQUEST.name}' "
        # (a hidden project's MRs are out by `no_merge_requests` already: not listed one by one)
        f"AND parent_id NOT IN (SELECT id FROM {at}.hidden_merge_requests)))").fetchall())
    return IndexScope(projects, guarded, allowed, every_project=len(projects) == len(paths),
                      all_guarded=guarded == projects, no_merge_requests=_paths_without_merge_requests(con, at, paths),
                      denied=denied)


def _paths_without_merge_requests(con: duckdb.DuckDBPyConnection, at: str, paths: dict[str, set[int]]) -> frozenset[str]:
    """The document paths of the projects whose merge requests the viewer does not see (a path
    one of them ever had: over-filter rather than leak)."""
    hidden = {r[0] for r in con.execute(f"SELECT project_id FROM {at}.merge_requests_hidden_in").fetchall()}
    return frozenset(p for p, ids in paths.items() if ids & hidden)
