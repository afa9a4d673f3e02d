"""The lexical index layer: bring Tantivy in step with the documents of one project.

The diff is against the index itself (its stored hashes per document), so a crash at any point is
repaired by the next run; deletes and upserts go in one commit, which Tantivy applies atomically.
"""

from dataclasses import dataclass
from typing import ClassVar

from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.freshness import EntryState, compare
from gitlab_knowledge.layer_stats import LayerStats, timed
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
    return timed(lambda stats: _refresh(workspace, project, everything, stats), LexicalStats())


def _refresh(workspace: Workspace, project: str, everything: bool, stats: LexicalStats) -> None:
    index = workspace.lexical(create=True)
    have = index.state(project)
    with workspace.scratch("gk-lexical-") as tmp:
        staged = tmp / "documents.parquet"
        with workspace.read(wait=120.0) as con:
            docs = con.execute("SELECT id, content_hash, meta_hash FROM documents WHERE project_path = ?",
                               [project]).fetchall()
            comparison = compare({d[0]: (d[1], d[2]) for d in docs}, have)
            changed = [d[0] for d in docs] if everything else comparison.ids(
                EntryState.TEXT_CHANGED, EntryState.METADATA_CHANGED, EntryState.MISSING)
            if changed:
                stage_documents(con, changed, staged)
        stale = comparison.orphaned
        stats.documents = len(docs)
        stats.unchanged = len(docs) - len(changed)
        if changed or stale:
            with index.writer() as writer:
                for doc_id in stale + [c for c in changed if c in have]:
                    writer.delete_documents_by_term("doc_id", doc_id)
                if changed:
                    for batch in iter_documents(staged, 1000):
                        for row in batch:
                            writer.add_document(index.document(row))
                writer.commit()
        stats.indexed = len(changed)
        stats.deleted = len(stale)
    stats.index_documents = index.count(project)
