"""The paths each merge request touched, kept by the graph layer: what `history` (graph/history.py) reads.

`path_touches` holds a row per file of an MR's file list (`mr_files`) and per review note
positioned on a diff line (`note_positions`), with what `history` orders and scopes them by (the
MR's project, iid and `COALESCE(merged_at, updated_at)`), and on a note's row its thread as
`history` shows it (who opened it, how, when, whether it is resolved). Reading a path's history
was ~10 queries joining `notes`, `note_positions`, `mr_files`, `merge_requests` and
`discussions` through a lens (~50 ms at 100K documents): here it is one scan of a ~56K-row table
per step of following renames, and one for the MRs shown.

Each row says what hides it, as the lenses hide what it comes from (store/visibility.py,
store/viewer_lens.py): `internal`, the note is internal; `thread_internal`, its thread holds an
internal note or system note (GitLab makes the whole thread internal, and the lenses' `discussions`
views hide it: the note may still count, its thread is not shown).

Rebuilt for an MR whenever the graph layer rebuilds it (graph/refresh.py: a change to the MR, its
threads or its file list), from the normalized rows and `mr_files`, in SQL. Migration 11 filled
them for the stores written before.
"""

import duckdb

from gitlab_knowledge import kinds

_MR = kinds.MERGE_REQUEST
# What history orders an MR by and says of it; a thread's first note and state.
_ITEM = ("m.iid, COALESCE(m.merged_at, m.updated_at) AS touched_at, m.title, m.state, m.web_url, m.merged_at, "
         "m.updated_at, m.author_username")
_FIRST = "{'author_username': author_username, 'body': body, 'created_at': created_at}"
_THREAD = ("{'author_username': f.first.author_username, 'body': f.first.body, 'created_at': f.first.created_at, "
           "'resolvable': d.resolvable, 'resolved': d.resolved}")

# The rows of the MRs whose id `ids` matches ({ids}: a condition on an id column, held by every
# part so that a rebuild reads its MRs' notes only). An MR without a `merge_requests` row has none
# (history joined it). A thread's first note is the one at its lowest position; a thread with no
# note (system notes only) or no `discussions` row is not shown (history read both).
_FILL = f"""
    INSERT INTO path_touches BY NAME
    SELECT * FROM (
        SELECT f.project_id, f.merge_request_id, {_ITEM}, NULL AS note_id, f.position, f.old_path, f.new_path,
               f.new_file, f.renamed_file, f.deleted_file, false AS internal, false AS thread_internal
        FROM mr_files f JOIN {_MR.table} m ON m.id = f.merge_request_id
        WHERE f.merge_request_id {{ids}}
        UNION ALL BY NAME
        SELECT m.project_id, m.id AS merge_request_id, {_ITEM}, n.id AS note_id, n.position, np.old_path,
               np.new_path, n.discussion_id, np.old_line, np.new_line, coalesce(n.internal, false) AS internal,
               coalesce(th.internal, false) AS thread_internal, th.thread
        FROM note_positions np JOIN notes n ON n.id = np.note_id
        JOIN {_MR.table} m ON n.noteable_type = '{_MR.noteable_type}' AND m.id = n.noteable_id
        LEFT JOIN (
            SELECT d.id, d.{_MR.thread_column} AS mr_id,
                   d.id IN (SELECT discussion_id FROM notes WHERE coalesce(internal, false)
                              AND noteable_type = '{_MR.noteable_type}' AND noteable_id {{ids}}
                            UNION ALL SELECT discussion_id FROM system_notes WHERE coalesce(internal, false)
                              AND noteable_type = '{_MR.noteable_type}' AND noteable_id {{ids}}) AS internal,
                   CASE WHEN f.first IS NOT NULL THEN {_THREAD} END AS thread
            FROM discussions d
            LEFT JOIN (SELECT discussion_id, noteable_id, arg_min({_FIRST}, position) AS first
                       FROM notes WHERE noteable_type = '{_MR.noteable_type}' AND noteable_id {{ids}} GROUP BY ALL) f
              ON f.discussion_id = d.id AND f.noteable_id = d.{_MR.thread_column}
            WHERE d.noteable_type = '{_MR.noteable_type}' AND d.{_MR.thread_column} {{ids}}
        ) th ON th.id = n.discussion_id AND th.mr_id = n.noteable_id
        WHERE m.id {{ids}}
    )
    -- An MR's rows together (a read of the MRs shown fetches few blocks), its file list first.
    ORDER BY merge_request_id, note_id NULLS FIRST, position"""
_PARAMS = _FILL.count("{ids}")


def rebuild(con: duckdb.DuckDBPyConnection, ids: list[int]) -> None:
    """The rows of these merge requests (by id), as their normalized rows and file lists say now."""
    con.execute("DELETE FROM path_touches WHERE merge_request_id IN (SELECT unnest(?::BIGINT[]))", [ids])
    con.execute(_FILL.replace("{ids}", "IN (SELECT unnest(?::BIGINT[]))"), [ids] * _PARAMS)
