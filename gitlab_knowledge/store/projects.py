"""Which stored project a configured path names, and what GitLab last called it."""

import duckdb


def project_id_for(con: duckdb.DuckDBPyConnection, project_path: str) -> int | None:
    """The GitLab id of the project a configured path names.

    GitLab resolves `GET /projects/:path` case-insensitively and through the redirects a rename
    or transfer leaves, so the path as configured need not be the project's `path_with_namespace`.
    The id GitLab returned for this path to the latest sync that got that far is the answer (the
    sync run records it); before any such sync, the stored project whose path matches, exactly or
    else in another case."""
    row = con.execute("""
        SELECT s.project_id FROM sync_runs s
        JOIN raw_payloads r ON r.resource_type = 'project' AND r.gitlab_key = CAST(s.project_id AS TEXT)
                            AND r.deleted_at IS NULL
        WHERE s.project_path = ? AND s.project_id IS NOT NULL
        ORDER BY s.id DESC LIMIT 1
    """, [project_path]).fetchone()
    if row:
        return int(row[0])
    row = con.execute("""
        SELECT CAST(gitlab_key AS BIGINT) FROM raw_payloads
        WHERE resource_type = 'project' AND deleted_at IS NULL
          AND lower(json_extract_string(json, '$.path_with_namespace')) = lower(?)
        ORDER BY json_extract_string(json, '$.path_with_namespace') = ? DESC, change_seq DESC LIMIT 1
    """, [project_path, project_path]).fetchone()
    return int(row[0]) if row else None


def canonical_path(con: duckdb.DuckDBPyConnection, project_id: int) -> str | None:
    """The project's `path_with_namespace` as GitLab last returned it."""
    row = con.execute("""
        SELECT json_extract_string(json, '$.path_with_namespace') FROM raw_payloads
        WHERE resource_type = 'project' AND gitlab_key = ?
    """, [str(project_id)]).fetchone()
    return row[0] if row else None


def project_ids_for(con: duckdb.DuckDBPyConnection, project_paths: list[str]) -> dict[str, int | None]:
    """`project_id_for` of each path: the paths a sync recorded, in one query (a batch's projects,
    just synced), the others one by one."""
    found = dict(con.execute("""
        SELECT project_path, arg_max(s.project_id, s.id) FROM sync_runs s
        JOIN raw_payloads r ON r.resource_type = 'project' AND r.gitlab_key = CAST(s.project_id AS TEXT)
                            AND r.deleted_at IS NULL
        WHERE s.project_path IN (SELECT unnest(?::TEXT[])) AND s.project_id IS NOT NULL
        GROUP BY project_path
    """, [project_paths]).fetchall())
    return {path: int(found[path]) if path in found else project_id_for(con, path) for path in project_paths}


def canonical_paths(con: duckdb.DuckDBPyConnection, project_ids: list[int]) -> dict[int, str | None]:
    """`canonical_path` of each project, in one query."""
    found = dict(con.execute("""
        SELECT CAST(gitlab_key AS BIGINT), json_extract_string(json, '$.path_with_namespace') FROM raw_payloads
        WHERE resource_type = 'project' AND gitlab_key IN (SELECT unnest(?::TEXT[]))
    """, [[str(p) for p in project_ids]]).fetchall())
    return {pid: found.get(pid) for pid in project_ids}


def synced_paths(con: duckdb.DuckDBPyConnection, project_paths: list[str]) -> set[str]:
    """Those of `project_paths` (as configured) with a completed sync (`sync_runs`, 'succeeded'):
    a path not among them has never been synced to the end, so its next sync is a first one."""
    return {path for (path,) in con.execute("""
        SELECT DISTINCT project_path FROM sync_runs
        WHERE status = 'succeeded' AND project_path IN (SELECT unnest(?::TEXT[]))
    """, [project_paths]).fetchall()}
