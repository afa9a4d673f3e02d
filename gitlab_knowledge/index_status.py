"""How the indexes stand against the documents: `stats` and `index status`.

For the vector table of one model and for the lexical index, every document is indexed (its hash
matches), stale (present with another hash), unindexed (missing) or failed (embedding gave up on
it); entries whose document is gone are orphaned. Stale means an older text or older metadata:
the comparison is `freshness.compare`, the one the layers make when they decide what to redo.
"""

from pathlib import Path
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.build import document_version
from gitlab_knowledge.freshness import compare, document_hashes
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.workspace import Workspace


def dir_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def index_status(workspace: Workspace, provider: str | None = None, model: str | None = None,
                 projects_only: list[str] | None = None) -> dict[str, Any]:
    """Every configured project's index status, or only `projects_only`'s (what a check of one
    partition asks: all projects' would make a sync of N projects read N×N states)."""
    from gitlab_knowledge.errors import StoreError

    config = workspace.config
    chosen = workspace.embedder(provider, model)
    vectors = workspace.vectors(chosen.provider, chosen.model) if config.lancedb_dir.exists() else None
    try:
        lexical = workspace.lexical()
    except StoreError:
        lexical = None
    sql = "SELECT project_path, id, content_hash, meta_hash, builder_version FROM documents"
    with workspace.read() as con:
        docs = (con.execute(sql + " WHERE project_path IN (SELECT unnest($1::VARCHAR[]))", [projects_only])
                if projects_only is not None else con.execute(sql)).fetchall()
        # A viewer's lens: the projects they read, not the config's list (which names the others).
        viewer = workspace.lens is not None and workspace.lens.viewer
        listed = [r[0] for r in con.execute("SELECT path_with_namespace FROM projects").fetchall()] \
            if viewer else config.projects
    wanted = listed if projects_only is None else [p for p in projects_only if not viewer or p in listed]
    projects: dict[str, dict[str, tuple[str, str]]] = {p: {} for p in wanted}
    version = document_version()
    for project, doc_id, content_hash, meta_hash, builder_version in docs:
        projects.setdefault(project, {})[doc_id] = document_hashes(content_hash, meta_hash, builder_version, version)
    out = []
    # Each index read once for every project (one scan, one reader), not once per project.
    names = sorted(projects)
    vector_states = vectors.document_states(names) if vectors else {}
    failures = vectors.failures_of(names) if vectors else {}
    lexical_states = lexical.states(names) if lexical else {}
    for project in names:
        documents = projects[project]
        vector_state = vector_states.get(project, {})
        failed = set(failures.get(project, {}))
        lexical_state = lexical_states.get(project, {})
        if viewer:  # an index entry of a document hidden from them is not theirs to count, orphan or not
            vector_state, lexical_state = ({k: v for k, v in state.items() if k in documents}
                                           for state in (vector_state, lexical_state))
            failed &= set(documents)
        out.append({"project": project, "documents": len(documents),
                    "vectors": compare(documents, vector_state, failed).counts(),
                    "lexical": compare(documents, lexical_state).counts()})
    return {"model": f"{chosen.provider}/{chosen.model}", "projects": out}


def stats(workspace: Workspace) -> dict[str, Any]:
    config = workspace.config
    with workspace.read() as con:
        by_type = con.execute("""
            SELECT project_path, source_type, count(*), count(*) FILTER (WHERE truncated)
            FROM documents GROUP BY 1, 2 ORDER BY 1, 2
        """).fetchall()
        last_sync = dict(con.execute("""
            SELECT project_path, max(finished_at) FROM sync_runs WHERE status = 'succeeded' GROUP BY 1
        """).fetchall())
        # The totals are keyed by table name: `issues`, `merge_requests`, then the threads and notes.
        tables = (*(k.table for k in kinds.ITEM_KINDS), "discussions", "notes")
        counts = dict(zip(tables, one_row(con.execute(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {table})" for table in tables))), strict=True))
    status = index_status(workspace)
    projects = []
    for entry in status["projects"]:
        types = {t: n for p, t, n, _ in by_type if p == entry["project"]}
        documents = entry["documents"]
        vectors = entry["vectors"]
        projects.append({
            "project": entry["project"], "documents": documents, "documents_by_type": types,
            "truncated": sum(t for p, _, _, t in by_type if p == entry["project"]),
            "embedded": vectors["indexed"], "embedded_pct": round(100 * vectors["indexed"] / documents, 1)
            if documents else 100.0, "embedding_failed": vectors["failed"],
            "lexical_documents": entry["lexical"]["indexed"] + entry["lexical"]["stale"],
            "last_sync": last_sync.get(entry["project"]),
        })
    return {
        "model": status["model"], "totals": counts, "projects": projects,
        "disk_bytes": {"duckdb": dir_size(config.duckdb_path), "lancedb": dir_size(config.lancedb_dir),
                       "tantivy": dir_size(config.tantivy_dir)},
    }
