"""The DuckDB schema as of version 1 (the seed spec's tables, keyed by GitLab's own ids).

`BASELINE_DDL` is the body of migration 1 and is frozen: stores exist that it wrote. Every later
change is a numbered migration in store/migrations.py, which also says what changed since (the
column comments below describe version 1; since migration 2, `sync_cursors.resource_type` holds
the kind names `issue` | `merge_request`).

Choices that differ from the seed spec, and why:
- Rows are keyed by GitLab ids (global for projects, issues, MRs, notes; the string id for
  discussions), not local autoincrement ids: one store mirrors one GitLab, and stable ids keep
  document ids, vectors and index entries valid across rebuilds.
- Every layer records a `change_seq` from one sequence, and each downstream layer keeps a
  per-project watermark in `layer_state`, so a layer redoes only what changed upstream and a crash
  between layers is caught up by the next run.
- Raw payloads are one row per GitLab object (updated in place when its content changes) with a
  tombstone (`deleted_at`) instead of a delete, so the normalized layer learns about deletions.
- Vectors and their metadata (model, dims, content hash) live in LanceDB beside the vectors: the
  embeddings writer must not hold the DuckDB writer lock for the minutes embedding takes.
- `mr_files` is not created yet: it needs one `/diffs` call per MR and only file history uses it.
"""

BASELINE_DDL = """
CREATE SEQUENCE IF NOT EXISTS change_seq START 1;
CREATE SEQUENCE IF NOT EXISTS raw_payload_ids START 1;
CREATE SEQUENCE IF NOT EXISTS sync_run_ids START 1;

CREATE TABLE IF NOT EXISTS schema_info (key TEXT PRIMARY KEY, value TEXT);

CREATE TABLE IF NOT EXISTS raw_payloads (
    id BIGINT PRIMARY KEY,
    project_id BIGINT NOT NULL,
    resource_type TEXT NOT NULL,            -- project | issue | merge_request | discussion
    gitlab_key TEXT NOT NULL,               -- GitLab id; a discussion's string id
    parent_type TEXT,                       -- discussions: issue | merge_request
    parent_id BIGINT,                       -- discussions: the parent's GitLab id
    position INTEGER,                       -- discussions: order in the parent's list
    updated_at TIMESTAMP,                   -- GitLab's updated_at (a discussion: its newest note's)
    payload_hash TEXT NOT NULL,
    json TEXT NOT NULL,
    fetched_at TIMESTAMP NOT NULL,          -- when this version was fetched
    discussions_fetched_at TIMESTAMP,       -- issues/MRs: GitLab's clock at the last discussions fetch
    sync_run_id BIGINT,
    dagster_run_id TEXT,
    change_seq BIGINT NOT NULL,
    deleted_at TIMESTAMP,
    UNIQUE (resource_type, gitlab_key)
);

CREATE TABLE IF NOT EXISTS projects (
    id BIGINT PRIMARY KEY,
    path_with_namespace TEXT NOT NULL,
    name TEXT,
    description TEXT,
    default_branch TEXT,
    web_url TEXT,
    created_at TIMESTAMP,
    last_activity_at TIMESTAMP,
    raw_payload_id BIGINT
);

CREATE TABLE IF NOT EXISTS issues (
    id BIGINT PRIMARY KEY,
    project_id BIGINT NOT NULL,
    iid INTEGER NOT NULL,
    title TEXT,
    description TEXT,
    state TEXT,
    author_username TEXT,
    author_name TEXT,
    assignees TEXT[],
    milestone TEXT,
    labels TEXT[],
    confidential BOOLEAN,
    created_at TIMESTAMP,
    updated_at TIMESTAMP,
    closed_at TIMESTAMP,
    user_notes_count INTEGER,
    web_url TEXT,
    reference TEXT,
    raw_payload_id BIGINT,
    change_seq BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS merge_requests (
    id BIGINT PRIMARY KEY,
    project_id BIGINT NOT NULL,
    iid INTEGER NOT NULL,
    title TEXT,
    description TEXT,
    state TEXT,
    draft BOOLEAN,
    author_username TEXT,
    author_name TEXT,
    assignees TEXT[],
    reviewers TEXT[],
    milestone TEXT,
    labels TEXT[],
    source_branch TEXT,
    target_branch TEXT,
    created_at TIMESTAMP,
    updated_at TIMESTAMP,
    merged_at TIMESTAMP,
    closed_at TIMESTAMP,
    merged_by TEXT,
    user_notes_count INTEGER,
    web_url TEXT,
    reference TEXT,
    raw_payload_id BIGINT,
    change_seq BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS labels (
    project_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (project_id, name)
);

CREATE TABLE IF NOT EXISTS issue_labels (
    issue_id BIGINT NOT NULL,
    label_name TEXT NOT NULL,
    PRIMARY KEY (issue_id, label_name)
);

CREATE TABLE IF NOT EXISTS mr_labels (
    merge_request_id BIGINT NOT NULL,
    label_name TEXT NOT NULL,
    PRIMARY KEY (merge_request_id, label_name)
);

CREATE TABLE IF NOT EXISTS discussions (
    id TEXT PRIMARY KEY,
    project_id BIGINT NOT NULL,
    noteable_type TEXT NOT NULL,            -- Issue | MergeRequest
    issue_id BIGINT,
    merge_request_id BIGINT,
    individual_note BOOLEAN NOT NULL,
    first_note_at TIMESTAMP,
    last_note_at TIMESTAMP,
    resolvable BOOLEAN,
    resolved BOOLEAN,
    note_count INTEGER NOT NULL,
    position INTEGER,
    raw_payload_id BIGINT,
    CHECK ((noteable_type = 'Issue' AND issue_id IS NOT NULL AND merge_request_id IS NULL)
        OR (noteable_type = 'MergeRequest' AND merge_request_id IS NOT NULL AND issue_id IS NULL))
);

CREATE TABLE IF NOT EXISTS notes (
    id BIGINT PRIMARY KEY,
    discussion_id TEXT NOT NULL,
    project_id BIGINT NOT NULL,
    noteable_type TEXT NOT NULL,
    noteable_id BIGINT NOT NULL,
    type TEXT,                              -- NULL | DiscussionNote | DiffNote
    author_username TEXT,
    author_name TEXT,
    body TEXT,
    created_at TIMESTAMP,
    updated_at TIMESTAMP,
    position INTEGER NOT NULL,              -- order within the thread
    resolvable BOOLEAN,
    resolved BOOLEAN,
    resolved_by TEXT,
    resolved_at TIMESTAMP,
    internal BOOLEAN,
    raw_payload_id BIGINT
);

CREATE TABLE IF NOT EXISTS note_positions (
    note_id BIGINT PRIMARY KEY,
    old_path TEXT,
    new_path TEXT,
    old_line INTEGER,
    new_line INTEGER,
    position_type TEXT,
    base_sha TEXT,
    start_sha TEXT,
    head_sha TEXT
);

CREATE TABLE IF NOT EXISTS sync_runs (
    id BIGINT PRIMARY KEY,
    project_path TEXT NOT NULL,
    project_id BIGINT,
    mode TEXT NOT NULL,                     -- incremental | full
    status TEXT NOT NULL,                   -- running | succeeded | failed | abandoned
    started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    heartbeat_at TIMESTAMP,
    pid INTEGER,
    hostname TEXT,
    dagster_run_id TEXT,
    error TEXT,
    stats TEXT                              -- JSON: fetched, new, updated, deleted, api_calls, ...
);

CREATE TABLE IF NOT EXISTS sync_cursors (
    project_id BIGINT NOT NULL,
    resource_type TEXT NOT NULL,            -- issues | merge_requests
    updated_at_cursor TEXT,                 -- GitLab's own string, sent back as updated_after
    tie_breaker_id BIGINT,
    moved_at TIMESTAMP,
    sync_run_id BIGINT,
    PRIMARY KEY (project_id, resource_type)
);

CREATE TABLE IF NOT EXISTS layer_state (
    project_id BIGINT NOT NULL,
    layer TEXT NOT NULL,                    -- normalized | documents
    watermark BIGINT NOT NULL,
    updated_at TIMESTAMP,
    dagster_run_id TEXT,
    PRIMARY KEY (project_id, layer)
);

CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,                    -- issue:<id> | merge_request:<id> | discussion:<id>
    source_type TEXT NOT NULL,              -- issue | merge_request | discussion
    source_id TEXT NOT NULL,
    project_id BIGINT NOT NULL,
    project_path TEXT NOT NULL,
    parent_type TEXT NOT NULL,              -- issue | merge_request (the document itself for those)
    parent_id BIGINT NOT NULL,
    parent_iid INTEGER NOT NULL,
    parent_title TEXT,
    title TEXT,
    author_username TEXT,
    labels TEXT[],
    state TEXT,
    created_at TIMESTAMP,
    updated_at TIMESTAMP,
    url TEXT,
    confidential BOOLEAN,
    internal BOOLEAN,
    content_text TEXT NOT NULL,
    content_hash TEXT NOT NULL,             -- SHA-256 of content_text: re-embed iff it changes
    meta_hash TEXT NOT NULL,                -- SHA-256 of the filterable metadata
    token_count INTEGER,
    truncated BOOLEAN NOT NULL,
    raw_payload_ids BIGINT[],
    sync_run_id BIGINT,
    dagster_run_id TEXT,
    built_at TIMESTAMP NOT NULL,
    change_seq BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS document_labels (
    document_id TEXT NOT NULL,
    label_name TEXT NOT NULL,
    PRIMARY KEY (document_id, label_name)
);
"""

