"""The lexical index layer: bring Tantivy in step with the documents of one project.

The diff is against the index itself (its stored hashes per document), so a crash at any point is
repaired by the next run; deletes and upserts go in one commit, which Tantivy applies atomically.
"""

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gitlab_knowledge.config import Config
from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.store.db import read_connection


@dataclass
class LexicalStats:
    documents: int = 0
    indexed: int = 0
    deleted: int = 0
    unchanged: int = 0
    index_documents: int = 0
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def refresh_lexical(config: Config, project: str, *, everything: bool = False) -> LexicalStats:
    started = time.monotonic()
    stats = LexicalStats()
    index = LexicalIndex(config.tantivy_dir, create=True)
    have = index.state(project)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gk-lexical-", dir=config.data_dir) as tmp:
        staged = Path(tmp) / "documents.parquet"
        with read_connection(config.duckdb_path, wait=120.0) as con:
            docs = con.execute("SELECT id, content_hash, meta_hash FROM documents WHERE project_path = ?",
                               [project]).fetchall()
            changed = [d[0] for d in docs if everything or have.get(d[0]) != (d[1], d[2])]
            if changed:
                stage_documents(con, changed, staged)
        current = {d[0] for d in docs}
        stale = sorted(set(have) - current)
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
    stats.duration_s = time.monotonic() - started
    return stats
