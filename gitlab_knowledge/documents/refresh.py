"""The documents layer: rebuild the documents of every parent that changed since the watermark.

A changed parent (its row, labels or any thread) gets all of its documents rebuilt; a document is
rewritten only when its text or metadata hash changed, and threads that vanished lose their
document. Documents of parents that no longer exist are removed at the end of every run.
"""

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.build import Document, document_version, parent_document, thread_document
from gitlab_knowledge.documents.release import release_documents
from gitlab_knowledge.documents.wiki import wiki_documents
from gitlab_knowledge.layer_stats import LayerStats, timed, together_stats
from gitlab_knowledge.layers import DOCUMENTS
from gitlab_knowledge.store.bulk import insert_rows
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.store.watermarks import (
    RANGES,
    Ranges,
    range_params,
    run_batches,
    run_together,
    set_watermark,
    set_watermarks,
)
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

BATCH_PARENTS = 1000
# The kinds not shaped like an issue (kinds.KEYED_KINDS): a row of the kind's table → its documents.
KEYED_BUILDERS: dict[str, Callable[[dict[str, Any], str, int | None], list[Document]]] = {
    kinds.WIKI_PAGE.name: wiki_documents,
    kinds.RELEASE.name: release_documents,
}
log = logging.getLogger(__name__)


@dataclass
class DocumentStats(LayerStats):
    PREFIX: ClassVar[str] = DOCUMENTS.prefix
    ASSET: ClassVar[str] = DOCUMENTS.asset

    parents: int = 0
    built: int = 0
    new: int = 0
    content_changed: int = 0
    metadata_changed: int = 0
    deleted: int = 0
    rebuilt: int = 0  # rewritten for a new builder version alone
    truncated: int = 0
    duration_s: float = 0.0


def refresh(workspace: Workspace, project_path: str, *, dagster_run_id: str | None = None,
            batch_parents: int = BATCH_PARENTS) -> DocumentStats:
    """The documents layer's entry point: rebuild the documents of one project's changed parents."""
    return timed(lambda stats: _refresh(workspace, project_path, dagster_run_id, batch_parents, stats), DocumentStats())


def _refresh(workspace: Workspace, project_path: str, dagster_run_id: str | None, batch_parents: int,
             stats: DocumentStats) -> None:
    with workspace.write() as con:
        project_id = project_id_for(con, project_path)
        if project_id is not None and _outdated(con, [project_id]):
            # Documents of another builder/chunking version: every parent is rebuilt (after a crash
            # halfway, again from the start, cheaply: the rebuilt ones compare unchanged).
            set_watermark(con, project_id, DOCUMENTS.state, 0, dagster_run_id)

    def rebuild(con: duckdb.DuckDBPyConnection, project_id: int, low: int, high: int) -> None:
        _rebuild_ranges(con, {project_id: (low, high)}, {project_id: project_path}, dagster_run_id,
                        lambda _project: stats)

    def finish(con: duckdb.DuckDBPyConnection, project_id: int) -> None:
        stats.deleted += sum(_delete_orphans(con, [project_id]).values())

    run_batches(workspace.write, project_path, DOCUMENTS.state,
                batch_end=lambda con, project_id, low: _batch_end(con, project_id, low, batch_parents),
                rebuild=rebuild, finish=finish, dagster_run_id=dagster_run_id)


def refresh_together(con: duckdb.DuckDBPyConnection, project_ids: dict[str, int], *,
                     dagster_run_id: str | None = None,
                     batch_parents: int = BATCH_PARENTS) -> tuple[dict[str, DocumentStats], list[str]]:
    """`refresh` of several projects (path -> id) in one pass and one transaction on `con`, as
    normalized/refresh.py's `refresh_together`: the same rows, a stats record per project, and
    the paths left out of the pass for `refresh` one by one."""
    started = time.monotonic()
    stats = {pid: DocumentStats() for pid in project_ids.values()}
    paths = {pid: path for path, pid in project_ids.items()}
    outdated = _outdated(con, list(stats))
    if outdated:  # as in `refresh`: every parent of such a project is rebuilt
        set_watermarks(con, dict.fromkeys(outdated, 0), DOCUMENTS.state, dagster_run_id)

    def finish(con: duckdb.DuckDBPyConnection, project_ids: list[int]) -> None:
        for pid, deleted in _delete_orphans(con, project_ids).items():
            stats[pid].deleted += deleted

    batches, left = run_together(
        con, list(stats), DOCUMENTS.state, limit=batch_parents, pending=_pending,
        rebuild=lambda con, ranges: _rebuild_ranges(con, ranges, paths, dagster_run_id, stats.__getitem__),
        finish=finish, dagster_run_id=dagster_run_id)
    return together_stats(project_ids, stats, batches, started), [p for p, pid in project_ids.items() if pid in left]


def _rebuild_ranges(con: duckdb.DuckDBPyConnection, ranges: Ranges, paths: dict[int, str],
                    dagster_run_id: str | None, stats_of: Callable[[int], DocumentStats]) -> None:
    """Rebuild the documents of the parents changed in each project's range (id -> (low, high]);
    `paths`: the project paths the documents name, as configured."""
    changed, owner = _changed_parents(con, ranges)
    _requeue_closers(con, changed.get(kinds.ISSUE.name, []))  # before the issues' documents move
    for kind, ids in changed.items():
        if kind in KEYED_BUILDERS:
            by_project: dict[int, list[int]] = defaultdict(list)
            for pid in ids:
                by_project[owner[pid]].append(pid)
            for project_id, own in by_project.items():
                _rebuild_keyed(con, paths[project_id], kind, own, dagster_run_id, stats_of(project_id))
        else:
            _rebuild(con, paths, kind, ids, dagster_run_id, stats_of)


# Issues, MRs and the keyed kinds draw their change_seq from one sequence, so a range of it is a
# batch of parents.
_PARENT_TABLES = (*((k.name, k.table) for k in kinds.ITEM_KINDS), *((k.name, k.table) for k in kinds.KEYED_KINDS))
_PARENTS_AFTER = """
    SELECT kind, id, change_seq FROM (
""" + "        UNION ALL\n".join(f"""        SELECT '{name}' AS kind, id, change_seq FROM {table}
        WHERE project_id = $project AND change_seq > $low
""" for name, table in _PARENT_TABLES) + """    )
"""


def _batch_end(con: duckdb.DuckDBPyConnection, project_id: int, low: int, batch_parents: int) -> int | None:
    """The change_seq of the last of the next `batch_parents` changed parents; None when none changed."""
    row = con.execute(f"SELECT max(change_seq) FROM ({_PARENTS_AFTER} ORDER BY change_seq LIMIT $n)",
                      {"project": project_id, "low": low, "n": batch_parents}).fetchone()
    return int(row[0]) if row and row[0] is not None else None


# The same parents of several projects, each in its range (watermarks.RANGES).
_PARENTS_IN_RANGES = """
    SELECT kind, id, change_seq, project_id FROM (
""" + "        UNION ALL\n".join(f"""        SELECT '{name}' AS kind, t.id, t.change_seq, t.project_id FROM {table} t
        JOIN ({RANGES}) w ON t.project_id = w.project_id AND t.change_seq > w.low AND t.change_seq <= w.high
""" for name, table in _PARENT_TABLES) + """    )
"""


def _changed_parents(con: duckdb.DuckDBPyConnection, ranges: Ranges) -> tuple[dict[str, list[int]], dict[int, int]]:
    """The parents changed in the ranges, by kind, and each one's project."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    owner: dict[int, int] = {}
    for kind, pid, _seq, project_id in con.execute(f"{_PARENTS_IN_RANGES} ORDER BY change_seq",
                                                   range_params(ranges)).fetchall():
        by_kind[kind].append(int(pid))
        owner[int(pid)] = int(project_id)
    return by_kind, owner


def _pending(con: duckdb.DuckDBPyConnection, lows: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Per project with parents changed after its watermark in `lows`: (the last change_seq, how many)."""
    rows = con.execute(f"SELECT project_id, max(change_seq), count(*) FROM ({_PARENTS_IN_RANGES}) GROUP BY project_id",
                       range_params({pid: (low, 2**62) for pid, low in lows.items()})).fetchall()
    return {int(pid): (int(high), int(n)) for pid, high, n in rows}


def _outdated(con: duckdb.DuckDBPyConnection, project_ids: list[int]) -> list[int]:
    """The projects with documents of another builder version."""
    return [int(r[0]) for r in con.execute(
        "SELECT DISTINCT project_id FROM documents WHERE project_id IN (SELECT unnest(?::BIGINT[])) "
        "AND builder_version IS DISTINCT FROM ?", [project_ids, document_version()]).fetchall()]


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@dataclass
class _Parents:
    """One kind's parents of a batch with their threads and notes, as the document builder reads them."""

    rows: list[dict[str, Any]]
    threads: dict[int, list[dict[str, Any]]]  # by parent id, in position order
    notes: dict[str, list[dict[str, Any]]]  # by discussion id, in position order
    closes: dict[int, list[tuple[str, str | None]]]  # by MR id: the issues it closes


def _rebuild(con: duckdb.DuckDBPyConnection, paths: dict[int, str], kind: str, ids: list[int],
             dagster_run_id: str | None, stats_of: Callable[[int], DocumentStats]) -> None:
    """Rebuild the documents of the parents `ids` of `kind`: load, build, compare, write."""
    parents = _load(con, kind, ids)
    docs = _build(kind, parents, paths)
    for parent in parents.rows:
        stats_of(parent["project_id"]).parents += 1
    for doc in docs:
        stats_of(doc.project_id).built += 1
    changed, gone = _compare(con, kind, ids, docs, stats_of)
    _write(con, changed, gone, dagster_run_id)


def _rebuild_keyed(con: duckdb.DuckDBPyConnection, project_path: str, kind: str, ids: list[int],
                   dagster_run_id: str | None, stats: DocumentStats) -> None:
    """The documents of changed rows of a keyed kind (a wiki page: one, or one per section)."""
    keyed = kinds.keyed(kind)
    assert keyed is not None  # KEYED_BUILDERS names keyed kinds only
    table = keyed.table
    rows = _rows(con, f"""
        SELECT t.*, r.sync_run_id AS raw_sync_run_id FROM {table} t
        LEFT JOIN raw_payloads r ON r.id = t.raw_payload_id
        WHERE t.id IN (SELECT unnest(?::BIGINT[]))
    """, [ids])
    docs = [doc for row in rows for doc in KEYED_BUILDERS[kind](row, project_path, row["raw_sync_run_id"])]
    stats.parents += len(rows)
    stats.built += len(docs)
    changed, gone = _compare(con, kind, ids, docs, lambda _project: stats)
    _write(con, changed, gone, dagster_run_id)


def _load(con: duckdb.DuckDBPyConnection, kind: str, ids: list[int]) -> _Parents:
    k = kinds.kind(kind)
    table, noteable_type, fk = k.table, k.noteable_type, k.thread_column
    rows = _rows(con, f"""
        SELECT t.*, r.sync_run_id AS raw_sync_run_id FROM {table} t
        LEFT JOIN raw_payloads r ON r.id = t.raw_payload_id
        WHERE t.id IN (SELECT unnest(?::BIGINT[]))
    """, [ids])
    threads = _rows(con, f"""
        SELECT d.id, d.{fk} AS parent_id, d.position, d.raw_payload_id, r.sync_run_id AS raw_sync_run_id
        FROM discussions d LEFT JOIN raw_payloads r ON r.id = d.raw_payload_id
        WHERE d.{fk} IN (SELECT unnest(?::BIGINT[])) ORDER BY d.{fk}, d.position
    """, [ids])
    notes = _rows(con, """
        SELECT n.discussion_id, n.id, n.author_username, n.body, n.created_at, n.updated_at, n.internal,
               p.new_path, p.old_path, p.new_line, p.old_line
        FROM notes n LEFT JOIN note_positions p ON p.note_id = n.id
        WHERE n.noteable_type = ? AND n.noteable_id IN (SELECT unnest(?::BIGINT[]))
        ORDER BY n.discussion_id, n.position
    """, [noteable_type, ids])
    notes_by_thread: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for note in notes:
        notes_by_thread[note["discussion_id"]].append(note)
    threads_by_parent: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for thread in threads:
        threads_by_parent[thread["parent_id"]].append(thread)
    closes = _closed_issues(con, ids) if kind == kinds.MERGE_REQUEST.name else {}
    return _Parents(rows, threads_by_parent, notes_by_thread, closes)


def _build(kind: str, parents: _Parents, paths: dict[int, str]) -> list[Document]:
    """Every document of the parents: the parent's own, then one per thread that has notes."""
    docs: list[Document] = []
    for parent in parents.rows:
        project_path = paths[parent["project_id"]]
        docs.append(parent_document(kind, parent, project_path, parent["raw_payload_id"], parent["raw_sync_run_id"],
                                    parents.closes.get(parent["id"], [])))
        for thread in parents.threads.get(parent["id"], []):
            thread_notes = parents.notes.get(thread["id"], [])
            if thread_notes:
                sync_run = max(filter(None, (parent["raw_sync_run_id"], thread["raw_sync_run_id"])), default=None)
                docs.append(thread_document(kind, parent, thread, thread_notes, project_path,
                                            parent["raw_payload_id"], sync_run))
    return docs


def _compare(con: duckdb.DuckDBPyConnection, kind: str, ids: list[int], docs: list[Document],
             stats_of: Callable[[int], DocumentStats]) -> tuple[list[Document], list[str]]:
    """(the documents to write, the stored ones to delete), counted in `stats`: a document whose
    text, metadata and builder version are all unchanged is left alone."""
    existing = {row[0]: (row[1], row[2], row[3], row[4]) for row in con.execute("""
        SELECT id, content_hash, meta_hash, builder_version, project_id FROM documents
        WHERE parent_type = ? AND parent_id IN (SELECT unnest(?::BIGINT[]))
    """, [kind, ids]).fetchall()}
    changed: list[Document] = []
    version = document_version()
    for doc in docs:
        before = existing.get(doc.id)
        stats = stats_of(doc.project_id)
        if before is None:
            stats.new += 1
        elif before[0] != doc.content_hash:
            stats.content_changed += 1
        elif before[1] != doc.meta_hash:
            stats.metadata_changed += 1
        elif before[2] != version:
            stats.rebuilt += 1  # another builder wrote the same text and hash: only the version is new
        else:
            continue
        changed.append(doc)
        if doc.truncated:
            stats.truncated += 1
            log.warning("document %s (%s) exceeded ~8,000 tokens and was cut from the middle", doc.id, doc.url)
    gone = sorted(set(existing) - {d.id for d in docs})
    for doc_id in gone:
        stats_of(existing[doc_id][3]).deleted += 1
    return changed, gone


def _write(con: duckdb.DuckDBPyConnection, changed: list[Document], gone: list[str], dagster_run_id: str | None) -> None:
    _delete(con, [d.id for d in changed] + gone)
    now, version = utcnow(), document_version()
    insert_rows(con, "documents", [document_row(d, dagster_run_id, now, version) for d in changed],
                {"change_seq": "nextval('change_seq')"})
    insert_rows(con, "document_labels", [{"document_id": d.id, "label_name": name}
                                         for d in changed for name in sorted(set(d.labels))])


def document_row(d: Document, dagster_run_id: str | None, built_at: datetime, version: str) -> dict[str, Any]:
    """A document's `documents` row: its metadata columns (COLUMNS, through the Document), then
    what only the documents table keeps (ids, text, hashes, provenance)."""
    return {
        "id": d.id, **d.columns(), "source_id": d.source_id, "project_id": d.project_id, "parent_id": d.parent_id,
        "parent_title": d.parent_title, "content_text": d.content_text, "content_hash": d.content_hash,
        "meta_hash": d.meta_hash, "token_count": d.token_count, "truncated": d.truncated,
        "raw_payload_ids": d.raw_payload_ids, "sync_run_id": d.sync_run_id, "dagster_run_id": dagster_run_id,
        "built_at": built_at, "builder_version": version,
    }


def _closed_issues(con: duckdb.DuckDBPyConnection, mr_ids: list[int]) -> dict[int, list[tuple[str, str | None]]]:
    """The issues each MR's own title or description closes (graph layer), with their titles.
    Only the MR's own words count: a link from the issue's side changes the issue, not the MR,
    so the MR's document would not be rebuilt when it appears. Only the titles of the MR's own
    project's public issues are written (other references stay bare): the MR's text is
    searchable by whoever may read the MR, and would otherwise show a confidential issue's title,
    or, on a shared server, the title of an issue in a project that reader cannot see."""
    out: dict[int, list[tuple[str, str | None]]] = defaultdict(list)
    for mr_id, path, iid, own, title in con.execute(f"""
        SELECT DISTINCT r.source_id, r.target_path, r.target_iid, r.target_project_id = r.project_id,
               CASE WHEN i.confidential IS FALSE AND i.project_id = r.project_id THEN i.title END
        FROM item_references r
        LEFT JOIN {kinds.ISSUE.table} i ON i.project_id = r.target_project_id AND i.iid = r.target_iid
        WHERE r.source_type = ? AND r.kind = 'closes'
          AND r.source_id IN (SELECT unnest(?::BIGINT[]))
        ORDER BY r.source_id, r.target_project_id = r.project_id DESC, r.target_path, r.target_iid
    """, [kinds.MERGE_REQUEST.name, mr_ids]).fetchall():
        out[int(mr_id)].append((kinds.ISSUE.ref(iid, None if own else path), title))
    return out


def _requeue_closers(con: duckdb.DuckDBPyConnection, issue_ids: list[int]) -> None:
    """An MR's `Closes:` line carries the titles of the issues it closes, except confidential ones
    (`_closed_issues`), but the MR's document is rebuilt only when the MR changes. So when an issue
    changed confidentiality (either way) or title since its own document was built, the MRs that
    close it get a new change_seq: this run rebuilds them (its later batches read past the
    watermark), or, for an MR of another project, that project's next documents run does."""
    if not issue_ids:
        return
    con.execute(f"""
        UPDATE {kinds.MERGE_REQUEST.table} SET change_seq = nextval('change_seq')
        WHERE id IN (
            SELECT r.source_id FROM item_references r
            JOIN {kinds.ISSUE.table} i ON i.project_id = r.target_project_id AND i.iid = r.target_iid
            JOIN documents d ON d.parent_type = ? AND d.source_type = ? AND d.parent_id = i.id
            WHERE r.source_type = ? AND r.kind = 'closes' AND i.id IN (SELECT unnest(?::BIGINT[]))
              AND (d.confidential IS DISTINCT FROM coalesce(i.confidential, FALSE) OR d.parent_title IS DISTINCT FROM i.title))
    """, [kinds.ISSUE.name, kinds.ISSUE.name, kinds.MERGE_REQUEST.name, issue_ids])


def _delete(con: duckdb.DuckDBPyConnection, doc_ids: list[str]) -> None:
    if doc_ids:
        con.execute("DELETE FROM document_labels WHERE document_id IN (SELECT unnest(?::TEXT[]))", [doc_ids])
        con.execute("DELETE FROM documents WHERE id IN (SELECT unnest(?::TEXT[]))", [doc_ids])


def _delete_orphans(con: duckdb.DuckDBPyConnection, project_ids: list[int]) -> dict[int, int]:
    """Delete the projects' documents whose parent is gone; how many, per project that had any."""
    parents = "\n            UNION ALL\n".join(
        f"SELECT 1 FROM {table} p WHERE d.parent_type = ? AND p.id = d.parent_id" for _, table in _PARENT_TABLES)
    orphans = con.execute(f"""
        SELECT d.id, d.project_id FROM documents d
        WHERE d.project_id IN (SELECT unnest(?::BIGINT[])) AND NOT EXISTS (
            {parents})
    """, [project_ids, *(name for name, _ in _PARENT_TABLES)]).fetchall()
    _delete(con, [doc_id for doc_id, _ in orphans])
    counts: dict[int, int] = defaultdict(int)
    for _, project_id in orphans:
        counts[int(project_id)] += 1
    return counts
