"""Migration 11: the paths each merge request touched (graph/path_rows.py), apart from
store/migrations.py, which holds the machinery and migrations 1-10 (registered when it is loaded).

Like every migration it spells out its own SQL: what it does stays what it did when it shipped.
"""

import duckdb

from gitlab_knowledge.store.migrations import migration


@migration(11, "the paths each merge request touched")
def _path_touches(con: duckdb.DuckDBPyConnection) -> None:
    # A row per file of an MR's file list and per review note on a diff line, with what `history`
    # orders and scopes them by and (a note's row) its thread as `history` shows it: `history`
    # reads a path's rows here instead of joining the notes, their positions, the file lists, the
    # MRs and the threads through a lens (~10 queries, ~50 ms at 100K documents). `internal` and
    # `thread_internal` say what a lens that hides internal notes hides: the row, or its thread.
    con.execute("""
        CREATE TABLE path_touches (
            project_id BIGINT NOT NULL,
            merge_request_id BIGINT NOT NULL,
            iid BIGINT NOT NULL,                -- the MR's
            touched_at TIMESTAMP,               -- the MR's COALESCE(merged_at, updated_at)
            title TEXT,                         -- what history says of the MR
            state TEXT,
            web_url TEXT,
            merged_at TIMESTAMP,
            updated_at TIMESTAMP,
            author_username TEXT,
            note_id BIGINT,                     -- NULL: a row of the MR's file list
            position INTEGER,                   -- the file's place in the list, or the note's in its thread
            old_path TEXT,
            new_path TEXT,
            new_file BOOLEAN,                   -- a file row's change; NULL on a note's row
            renamed_file BOOLEAN,
            deleted_file BOOLEAN,
            discussion_id TEXT,                 -- a note's row: its thread and diff lines
            old_line INTEGER,
            new_line INTEGER,
            internal BOOLEAN NOT NULL,          -- the note is internal
            thread_internal BOOLEAN NOT NULL,   -- its thread holds an internal note or system note
            thread STRUCT(author_username TEXT, body TEXT, created_at TIMESTAMP, resolvable BOOLEAN,
                          resolved BOOLEAN)     -- the thread's first note and state; NULL: not shown
        )
    """)
    # Filled here from the normalized rows and the file lists the graph layer already keeps (no
    # GitLab call, well under a second at 100K documents): `history` answers at once after the
    # upgrade, the same as before it, without a graph run; the graph layer keeps them from now on.
    con.execute("""
        INSERT INTO path_touches BY NAME
        SELECT * FROM (
            SELECT f.project_id, f.merge_request_id, m.iid, COALESCE(m.merged_at, m.updated_at) AS touched_at,
                   m.title, m.state, m.web_url, m.merged_at, m.updated_at, m.author_username, NULL AS note_id,
                   f.position, f.old_path, f.new_path, f.new_file, f.renamed_file, f.deleted_file,
                   false AS internal, false AS thread_internal
            FROM mr_files f JOIN merge_requests m ON m.id = f.merge_request_id
            UNION ALL BY NAME
            SELECT m.project_id, m.id AS merge_request_id, m.iid, COALESCE(m.merged_at, m.updated_at) AS touched_at,
                   m.title, m.state, m.web_url, m.merged_at, m.updated_at, m.author_username, n.id AS note_id,
                   n.position, np.old_path, np.new_path, n.discussion_id, np.old_line, np.new_line, coalesce(n.internal, false) AS internal,
                   coalesce(th.internal, false) AS thread_internal, th.thread
            FROM note_positions np JOIN notes n ON n.id = np.note_id
            JOIN merge_requests m ON n.noteable_type = 'MergeRequest' AND m.id = n.noteable_id
            LEFT JOIN (
                SELECT d.id, d.merge_request_id AS mr_id,
                       d.id IN (SELECT discussion_id FROM notes WHERE coalesce(internal, false)
                                UNION ALL SELECT discussion_id FROM system_notes WHERE coalesce(internal, false)) AS internal,
                       CASE WHEN f.first IS NOT NULL THEN {'author_username': f.first.author_username, 'body': f.first.body,
                            'created_at': f.first.created_at, 'resolvable': d.resolvable, 'resolved': d.resolved} END AS thread
                FROM discussions d
                LEFT JOIN (SELECT discussion_id, noteable_id,
                                  arg_min({'author_username': author_username, 'body': body, 'created_at': created_at},
                                          position) AS first
                           FROM notes WHERE noteable_type = 'MergeRequest' GROUP BY ALL) f
                  ON f.discussion_id = d.id AND f.noteable_id = d.merge_request_id
                WHERE d.noteable_type = 'MergeRequest'
            ) th ON th.id = n.discussion_id AND th.mr_id = n.noteable_id
        )
        -- An MR's rows together (a read of the MRs shown fetches few blocks), its file list first.
        ORDER BY merge_request_id, note_id NULLS FIRST, position
    """)
