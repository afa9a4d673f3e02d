"""The embeddings layer: embed the documents whose text (or the model) changed.

1. Compare DuckDB `documents` with the vector table: new or changed text → embed; same text but
   changed metadata → rewrite metadata only; gone from documents → delete.
2. Copy the rows to embed into a temporary Parquet file in one short read, so the DuckDB file is
   not held while embedding runs (minutes to hours) and memory stays bounded.
3. Embed in batches; a batch that fails is retried once, then its documents are recorded in
   `embedding_failures` with the error and retried on the next run. After three batches in a row
   fail because the provider is unreachable, the rest are recorded without trying.
"""

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.embeddings.provider import EmbeddingProvider, get_provider
from gitlab_knowledge.embeddings.vectors import VectorStore, chunk_rows, metadata_of
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.sync.progress import NullProgress, SyncProgress
from gitlab_knowledge.timeutil import utcnow

log = logging.getLogger(__name__)
FLUSH_CHUNKS = 2048
MAX_CONSECUTIVE_UNAVAILABLE = 3


@dataclass
class EmbedStats:
    provider: str = ""
    model: str = ""
    documents: int = 0
    unchanged: int = 0
    to_embed: int = 0
    embedded: int = 0
    chunks: int = 0
    metadata_updated: int = 0
    deleted: int = 0
    failed: int = 0
    retried_batches: int = 0
    embed_seconds: float = 0.0
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def docs_per_second(self) -> float:
        return self.embedded / self.embed_seconds if self.embed_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["docs_per_second"] = round(self.docs_per_second, 2)
        out["errors"] = self.errors[:5]
        return out


def plan(con: Any, store: VectorStore, project: str, everything: bool) -> tuple[list[str], list[str], list[str], int]:
    """(ids to embed, ids needing a metadata rewrite, ids to delete, document count)."""
    have = store.document_state(project)
    docs = con.execute("SELECT id, content_hash, meta_hash FROM documents WHERE project_path = ?", [project]).fetchall()
    embed, meta = [], []
    for doc_id, content_hash, meta_hash in docs:
        stored = have.get(doc_id)
        if everything or stored is None or stored[0] != content_hash:
            embed.append(doc_id)
        elif stored[1] != meta_hash:
            meta.append(doc_id)
    current = {d[0] for d in docs}
    return embed, meta, sorted(set(have) - current), len(docs)


def refresh_embeddings(config: Config, project: str, *, provider: EmbeddingProvider | None = None,
                       everything: bool = False, progress: SyncProgress | None = None,
                       batch_size: int | None = None,
                       sleep: Callable[[float], None] = time.sleep) -> EmbedStats:
    started = time.monotonic()
    provider = provider or get_provider(config)
    progress = progress or NullProgress()
    store = VectorStore(config.lancedb_dir, provider.provider, provider.model)
    stats = EmbedStats(provider=provider.provider, model=provider.model)
    batch_size = batch_size or config.embedding.batch_size
    config.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gk-embed-", dir=config.data_dir) as tmp:
        staged = Path(tmp) / "documents.parquet"
        with read_connection(config.duckdb_path, wait=120.0) as con:
            to_embed, meta_only, stale, stats.documents = plan(con, store, project, everything)
            wanted = to_embed + meta_only
            if wanted:
                stage_documents(con, wanted, staged)
        stats.to_embed = len(to_embed)
        stats.unchanged = stats.documents - len(to_embed) - len(meta_only)
        if stale:
            store.delete_docs(stale)
            stats.deleted = len(stale)
        if not wanted:
            if stale:
                store.optimize()
            stats.duration_s = time.monotonic() - started
            return stats
        embed_set = set(to_embed)
        metadata: dict[str, dict[str, Any]] = {}
        progress.resource_started(project, "embeddings", len(to_embed))
        pending: list[dict[str, Any]] = []
        failures: list[dict[str, Any]] = []
        succeeded: list[str] = []
        unavailable_streak = 0
        for docs in iter_documents(staged, batch_size):
            for doc in docs:
                if doc["id"] not in embed_set:
                    metadata[doc["id"]] = metadata_of(doc)
            docs = [d for d in docs if d["id"] in embed_set]
            if not docs:
                continue
            if unavailable_streak >= MAX_CONSECUTIVE_UNAVAILABLE:
                failures += _failed(docs, project, stats.errors[-1], 0)
                progress.advance(project, "embeddings", len(docs))
                continue
            chunks, error, attempts = _embed_with_retry(provider, docs, stats, sleep)
            if chunks is None:
                unavailable_streak = unavailable_streak + 1 if error.startswith("unavailable:") else 0
                failures += _failed(docs, project, error, attempts)
                stats.errors.append(error)
                log.warning("embedding batch of %d documents failed twice: %s", len(docs), error)
            else:
                unavailable_streak = 0
                now = utcnow()
                for doc, doc_chunks in zip(docs, chunks, strict=True):
                    pending += chunk_rows(doc, doc_chunks, provider.provider, provider.model, now)
                    succeeded.append(doc["id"])
                stats.embedded += len(docs)
                stats.chunks += sum(len(c) for c in chunks)
            if len(pending) >= FLUSH_CHUNKS:
                store.replace_docs(pending, provider.dims)
                pending = []
            progress.advance(project, "embeddings", len(docs))
        store.replace_docs(pending, provider.dims)
        stats.metadata_updated = store.update_metadata(metadata)
        store.clear_failures(succeeded)
        store.record_failures(failures)
        stats.failed = len(failures)
        if stats.embedded or stats.metadata_updated:
            store.optimize()
    stats.duration_s = time.monotonic() - started
    return stats


def _embed_with_retry(provider: EmbeddingProvider, docs: list[dict[str, Any]], stats: EmbedStats,
                      sleep: Callable[[float], None]) -> tuple[list[Any] | None, str, int]:
    error = ""
    for attempt in (1, 2):
        t0 = time.monotonic()
        try:
            chunks = provider.embed_documents([d["content_text"] for d in docs])
            stats.embed_seconds += time.monotonic() - t0
            return chunks, "", attempt
        except EmbeddingUnavailable as exc:
            error = f"unavailable: {exc}"
        except Exception as exc:  # noqa: BLE001 - a provider bug must cost one batch, not the run
            error = f"{type(exc).__name__}: {exc}"
        stats.embed_seconds += time.monotonic() - t0
        if attempt == 1:
            stats.retried_batches += 1
            sleep(0.5)
    return None, error, 2


def _failed(docs: list[dict[str, Any]], project: str, error: str, attempts: int) -> list[dict[str, Any]]:
    now = utcnow()
    return [{"doc_id": d["id"], "project": project, "content_hash": d["content_hash"], "error": error[:500],
             "attempts": attempts, "failed_at": now} for d in docs]
