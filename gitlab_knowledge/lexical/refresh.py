"""The lexical index layer: bring Tantivy in step with the documents of one project.

The diff is against the index itself (its stored hashes per document), so a crash at any point is
repaired by the next run; deletes and upserts go in one commit, which Tantivy applies atomically.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.freshness import EntryState, compare
from gitlab_knowledge.layer_stats import LayerStats
from gitlab_knowledge.layers import LEXICAL
from gitlab_knowledge.workspace import Workspace


@dataclass
class LexicalStats(LayerStats):
    PREFIX: ClassVar[str] = LEXICAL.prefix
    ASSET: ClassVar[str] = LEXICAL.asset

    documents: int = 0
    indexed: int = 0
    deleted: int = 0
    unchanged: int = 0
    index_documents: int = 0
    duration_s: float = 0.0


def refresh(workspace: Workspace, project: str, *, everything: bool = False) -> LexicalStats:
    """The lexical layer's entry point: bring the index in step with one project's documents."""
    return refresh_many(workspace, [project], everything=everything)[project]


def refresh_many(workspace: Workspace, projects: Sequence[str], *, everything: bool = False) -> dict[str, LexicalStats]:
    """Bring the index in step with the documents of every project in `projects`, in one writer and
    one commit: a Tantivy commit (segment files, fsyncs, the writer's threads) costs the same for
    one changed document as for thousands, and a batch of many projects paid it once per project.
    Each project's `duration_s` is its own diff plus its share of the one commit."""
    started = time.monotonic()
    index = workspace.lexical(create=True)
    out = {p: LexicalStats() for p in projects}
    plans: list[tuple[str, list[str], list[str], set[str]]] = []  # project, changed, stale, ids indexed before
    with workspace.scratch("gk-lexical-") as tmp:
        staged = tmp / "documents.parquet"
        wanted: list[str] = []
        with workspace.read(wait=120.0) as con:
            for project in projects:
                have = index.state(project)
                docs = con.execute("SELECT id, content_hash, meta_hash FROM documents WHERE project_path = ?",
                                   [project]).fetchall()
                comparison = compare({d[0]: (d[1], d[2]) for d in docs}, have)
                changed = [d[0] for d in docs] if everything else comparison.ids(
                    EntryState.TEXT_CHANGED, EntryState.METADATA_CHANGED, EntryState.MISSING)
                stats = out[project]
                stats.documents, stats.unchanged = len(docs), len(docs) - len(changed)
                stats.indexed, stats.deleted = len(changed), len(comparison.orphaned)
                plans.append((project, changed, comparison.orphaned, set(have)))
                wanted += changed
            if wanted:
                stage_documents(con, wanted, staged)
        if any(changed or stale for _p, changed, stale, _h in plans):
            with index.writer() as writer:
                for _project, changed, stale, indexed in plans:
                    for doc_id in stale + [c for c in changed if c in indexed]:
                        writer.delete_documents_by_term("doc_id", doc_id)
                if wanted:
                    for batch in iter_documents(staged, 1000):
                        for row in batch:
                            writer.add_document(index.document(row))
                writer.commit()
    share = round((time.monotonic() - started) / max(len(projects), 1), 3)
    for project, stats in out.items():
        stats.index_documents = index.count(project)
        stats.duration_s = share
    return out
