"""How the indexes stand against the documents: `stats` and `index status`.

For the vector table of one model and for the lexical index, every document is indexed (its hash
matches), stale (present with another hash), unindexed (missing) or failed (embedding gave up on
it); entries whose document is gone are orphaned. It is the same comparison the layers make when
they decide what to do, so "stale" here is exactly what the next sync will redo.
"""

from pathlib import Path
from typing import Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.store.db import read_connection


def dir_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _compare(documents: dict[str, str], entries: dict[str, tuple[str, str]], failed: set[str]) -> dict[str, int]:
    indexed = stale = unindexed = failures = 0
    for doc_id, content_hash in documents.items():
        entry = entries.get(doc_id)
        if entry is None:
            if doc_id in failed:
                failures += 1
            else:
                unindexed += 1
        elif entry[0] != content_hash:
            stale += 1
        else:
            indexed += 1
    return {"indexed": indexed, "stale": stale, "unindexed": unindexed, "failed": failures,
            "orphaned": len(set(entries) - set(documents))}


def index_status(config: Config, provider: str | None = None, model: str | None = None) -> dict[str, Any]:
    from gitlab_knowledge.embeddings.provider import get_provider
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.errors import StoreError
    from gitlab_knowledge.lexical.index import LexicalIndex

    chosen = get_provider(config, provider, model)
    vectors = VectorStore(config.lancedb_dir, chosen.provider, chosen.model) if config.lancedb_dir.exists() else None
    try:
        lexical = LexicalIndex(config.tantivy_dir)
    except StoreError:
        lexical = None
    with read_connection(config.duckdb_path, config.sync.lock_wait_seconds) as con:
        docs = con.execute("SELECT project_path, id, content_hash, meta_hash FROM documents").fetchall()
    projects: dict[str, dict[str, tuple[str, str]]] = {p: {} for p in config.projects}
    for project, doc_id, content_hash, meta_hash in docs:
        projects.setdefault(project, {})[doc_id] = (content_hash, meta_hash)
    out = []
    for project, documents in sorted(projects.items()):
        vector_state = vectors.document_state(project) if vectors else {}
        failed = set(vectors.failures(project)) if vectors else set()
        lexical_state = lexical.state(project) if lexical else {}
        content = {doc_id: h[0] for doc_id, h in documents.items()}
        out.append({"project": project, "documents": len(documents),
                    "vectors": _compare(content, vector_state, failed),
                    "lexical": _compare(content, lexical_state, set())})
    return {"model": f"{chosen.provider}/{chosen.model}", "projects": out}


def stats(config: Config) -> dict[str, Any]:
    with read_connection(config.duckdb_path, config.sync.lock_wait_seconds) as con:
        by_type = con.execute("""
            SELECT project_path, source_type, count(*), count(*) FILTER (WHERE truncated)
            FROM documents GROUP BY 1, 2 ORDER BY 1, 2
        """).fetchall()
        last_sync = dict(con.execute("""
            SELECT project_path, max(finished_at) FROM sync_runs WHERE status = 'succeeded' GROUP BY 1
        """).fetchall())
        counts = dict(zip(("issues", "merge_requests", "discussions", "notes"), con.execute("""
            SELECT (SELECT count(*) FROM issues), (SELECT count(*) FROM merge_requests),
                   (SELECT count(*) FROM discussions), (SELECT count(*) FROM notes)
        """).fetchone(), strict=True))
    status = index_status(config)
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
