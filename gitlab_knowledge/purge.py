"""Projects removed from the configuration: found by GitLab id, purged from every store.

A project taken out of `projects` would otherwise stay searchable for ever: its documents, vectors
and lexical entries remain, and no layer runs for it again. `sync` finds such projects and removes
them (asking first on a terminal; `--yes` answers for scripts). A project is "removed" when its
GitLab id is not the id any configured path resolves to, so a path typed in another case or the
old path of a renamed project keeps its data.

The indexes are cleaned first and DuckDB last, in one transaction: a crash in between leaves the
documents in DuckDB, so the next `sync` finds the project again and finishes the job.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.workspace import Workspace

# Every table holding a project's rows, children first; sync_runs stays as history. An item's
# label junction is keyed by the item, so it is found through the item's table.
_BY_PROJECT = ("note_positions", "notes", "system_notes", "item_references", "mentions", "user_items",
               "user_item_notes", "path_touches", "mr_files", "discussions",
               *(k.labels_table for k in kinds.ITEM_KINDS), "document_labels",
               "documents", *(k.table for k in kinds.ITEM_KINDS), *(k.table for k in kinds.KEYED_KINDS), "labels", "layer_state", "sync_cursors",
               "raw_payloads", "projects")
_CHILD_FILTERS = {
    "note_positions": "note_id IN (SELECT id FROM notes WHERE project_id = ?)",
    **{k.labels_table: f"{k.thread_column} IN (SELECT id FROM {k.table} WHERE project_id = ?)"
       for k in kinds.ITEM_KINDS},
    "document_labels": "document_id IN (SELECT id FROM documents WHERE project_id = ?)",
    "projects": "id = ?",
}


@dataclass
class RemovedProject:
    project_id: int
    path: str  # as GitLab last named it
    documents: int
    document_ids: list[str] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"project_id": self.project_id, "project": self.path, "documents": self.documents}


class Unresolved(Exception):
    """A configured path names no stored project: which ids are configured is in doubt."""


def removed_projects(con: duckdb.DuckDBPyConnection, configured: list[str],
                     keep_ids: Iterable[int] = ()) -> list[RemovedProject]:
    """Stored projects no configured path resolves to, and none of `keep_ids` (the projects the
    configured groups list, by the id GitLab gave). Raises `Unresolved` when a configured path
    resolves to nothing (never synced, or renamed and not synced since): then nothing is removed,
    since that path may well name one of the stored projects."""
    ids = set(keep_ids)
    for path in configured:
        project_id = project_id_for(con, path)
        if project_id is None:
            raise Unresolved(path)
        ids.add(project_id)
    stored = con.execute("""
        SELECT project_id, any_value(path) FROM (
            SELECT project_id, NULL AS path FROM raw_payloads
            UNION ALL SELECT CAST(gitlab_key AS BIGINT), json_extract_string(json, '$.path_with_namespace')
                FROM raw_payloads WHERE resource_type = 'project'
            UNION ALL SELECT project_id, project_path FROM documents
        ) GROUP BY project_id ORDER BY project_id
    """).fetchall()
    out = []
    for project_id, path in stored:
        if project_id in ids:
            continue
        docs = [r[0] for r in con.execute("SELECT id FROM documents WHERE project_id = ? ORDER BY id",
                                          [project_id]).fetchall()]
        out.append(RemovedProject(int(project_id), path or f"project id {project_id}", len(docs), docs))
    return out


def purge(workspace: Workspace, project: RemovedProject) -> None:
    """Remove one project from the vector tables, the lexical index and DuckDB."""
    purge_vectors(workspace, project)
    purge_lexical(workspace, project)
    purge_store(workspace, project)


def purge_vectors(workspace: Workspace, project: RemovedProject) -> None:
    _purge_vectors(workspace, project.document_ids)


def purge_lexical(workspace: Workspace, project: RemovedProject) -> None:
    _purge_lexical(workspace, project.document_ids)


def purge_store(workspace: Workspace, project: RemovedProject) -> None:
    """DuckDB last, in one transaction: a crash before it leaves the project to be found again."""
    with workspace.write() as con, transaction(con):
        for table in _BY_PROJECT:
            where = _CHILD_FILTERS.get(table, "project_id = ?")
            con.execute(f"DELETE FROM {table} WHERE {where}", [project.project_id])
        # Links other projects wrote to it stay, now pointing outside what the store syncs.
        con.execute("UPDATE item_references SET target_project_id = NULL, external = true "
                    "WHERE target_project_id = ?", [project.project_id])


def _purge_vectors(workspace: Workspace, doc_ids: list[str]) -> None:
    directory = workspace.config.lancedb_dir
    if not doc_ids or not directory.exists():
        return
    from gitlab_knowledge.embeddings.vectors import DELETE_BATCH, FAILURES_TABLE, lancedb, sql_in

    db = lancedb.connect(str(directory))
    # Every model's table, not only the configured one: search can be pointed at any (--model).
    for name in db.list_tables(limit=1000).tables:
        if not (name.startswith("vectors__") or name == FAILURES_TABLE):
            continue
        table = db.open_table(name)
        for i in range(0, len(doc_ids), DELETE_BATCH):
            table.delete(sql_in("doc_id", doc_ids[i:i + DELETE_BATCH]))


def _purge_lexical(workspace: Workspace, doc_ids: list[str]) -> None:
    if not doc_ids or not (workspace.config.tantivy_dir / "meta.json").exists():
        return
    index = workspace.lexical(create=True)
    with index.writer() as writer:
        for doc_id in doc_ids:
            writer.delete_documents_by_term("doc_id", doc_id)
        writer.commit()
