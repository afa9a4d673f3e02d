"""The embeddings layer: embed the documents whose text (or the model) changed.

1. Compare DuckDB `documents` with the vector table: new or changed text → embed; same text but
   changed metadata → rewrite metadata only; gone from documents → delete.
2. Copy the rows to embed into a temporary Parquet file in one short read, so the DuckDB file is
   not held while embedding runs (minutes to hours) and memory stays bounded.
3. Embed in batches; a batch that fails is retried once, then its documents are recorded in
   `embedding_failures` with the error and retried on the next run. After three batches in a row
   fail because the provider is unreachable (or one in which it hung until the timeout), the rest
   are recorded without trying.
4. Vectors are checked before anything is written (one per document, the table's dimension, finite
   numbers): a provider answering nonsense fails its batches, never the stored vectors.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.embeddings.provider import EmbeddingProvider
from gitlab_knowledge.embeddings.vectors import VectorStore, chunk_rows, metadata_of
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge.freshness import EntryState, compare
from gitlab_knowledge.layer_stats import LayerStats
from gitlab_knowledge.sync.progress import NullProgress, SyncProgress
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

log = logging.getLogger(__name__)
FLUSH_CHUNKS = 2048
MAX_CONSECUTIVE_UNAVAILABLE = 3
HUNG_S = 5.0  # an unavailable provider that took this long to say so timed out: do not wait twice


@dataclass
class EmbedStats(LayerStats):
    PREFIX: ClassVar[str] = "embeddings_"
    ASSET: ClassVar[str] = "document_embeddings"
    HIDDEN: ClassVar[tuple[str, ...]] = ("errors",)

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

    @property
    def last_error(self) -> str | None:
        return self.errors[-1] if self.errors else None

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out["docs_per_second"] = round(self.docs_per_second, 2)
        out["errors"] = self.errors[:5]
        return out

    def to_metadata(self) -> dict[str, Any]:
        out = super().to_metadata()
        out[self.PREFIX + "docs_per_second"] = round(self.docs_per_second, 2)
        if self.errors:
            out[self.PREFIX + "last_error"] = self.errors[-1]
        return out

    @classmethod
    def from_metadata(cls, metadata: Any) -> "EmbedStats":
        stats = super().from_metadata(metadata)
        last = metadata.get(cls.PREFIX + "last_error")
        if last is not None:
            stats.errors = [getattr(last, "value", last)]
        return stats


def plan(con: Any, store: VectorStore, project: str, everything: bool) -> tuple[list[str], list[str], list[str], int]:
    """(ids to embed, ids needing a metadata rewrite, ids to delete, document count)."""
    docs = con.execute("SELECT id, content_hash, meta_hash FROM documents WHERE project_path = ?", [project]).fetchall()
    comparison = compare({d[0]: (d[1], d[2]) for d in docs}, store.document_state(project))
    if everything:
        return [d[0] for d in docs], [], comparison.orphaned, len(docs)
    embed = comparison.ids(EntryState.TEXT_CHANGED, EntryState.MISSING, EntryState.FAILED)
    return embed, comparison.ids(EntryState.METADATA_CHANGED), comparison.orphaned, len(docs)


def refresh(workspace: Workspace, project: str, *, provider: EmbeddingProvider | None = None,
            everything: bool = False, progress: SyncProgress | None = None, batch_size: int | None = None,
            sleep: Callable[[float], None] = time.sleep) -> EmbedStats:
    """The embeddings layer's entry point: embed one project's new and changed documents with
    `provider` (default: the workspace's configured embedder)."""
    started = time.monotonic()
    config = workspace.config
    provider = provider or workspace.embedder()
    progress = progress or workspace.progress or NullProgress()
    store = workspace.vectors(provider.provider, provider.model)
    stats = EmbedStats(provider=provider.provider, model=provider.model)
    batch_size = batch_size or config.embedding.batch_size
    dims = store.dims()  # an existing table's dimension wins: vectors of another size cannot join it
    with workspace.scratch("gk-embed-") as tmp:
        staged = tmp / "documents.parquet"
        with workspace.read(wait=120.0) as con:
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
            chunks, error, attempts, unavailable = _embed_with_retry(provider, docs, stats, sleep)
            if chunks is not None:
                dims = dims or provider.dims
                problem = vectors_problem(chunks, len(docs), dims)
                if problem is not None:
                    chunks, error, unavailable = None, f"{provider.provider}/{provider.model} {problem}", False
            if chunks is None:
                hung = unavailable and error.startswith("unavailable (hung)")
                unavailable_streak = (MAX_CONSECUTIVE_UNAVAILABLE if hung
                                      else unavailable_streak + 1 if unavailable else 0)
                failures += _failed(docs, project, error, attempts)
                stats.errors.append(error)
                log.warning("embedding batch of %d documents failed: %s", len(docs), error)
            else:
                unavailable_streak = 0
                now = utcnow()
                for doc, doc_chunks in zip(docs, chunks, strict=True):
                    pending += chunk_rows(doc, doc_chunks, provider.provider, provider.model, now)
                    succeeded.append(doc["id"])
                stats.embedded += len(docs)
                stats.chunks += sum(len(c) for c in chunks)
            if len(pending) >= FLUSH_CHUNKS:
                store.replace_docs(pending, dims)
                pending = []
            progress.advance(project, "embeddings", len(docs))
        store.replace_docs(pending, dims or provider.dims)
        stats.metadata_updated = store.update_metadata(metadata)
        store.clear_failures(succeeded)
        store.record_failures(failures)
        stats.failed = len(failures)
        if stats.embedded or stats.metadata_updated:
            store.optimize()
    stats.duration_s = time.monotonic() - started
    return stats


def _embed_with_retry(provider: EmbeddingProvider, docs: list[dict[str, Any]], stats: EmbedStats,
                      sleep: Callable[[float], None]) -> tuple[list[Any] | None, str, int, bool]:
    """(chunks or None, the last error, attempts, whether the provider was unreachable)."""
    error = ""
    unavailable = False
    for attempt in (1, 2):
        t0 = time.monotonic()
        try:
            chunks = provider.embed_documents([d["content_text"] for d in docs])
            stats.embed_seconds += time.monotonic() - t0
            return chunks, "", attempt, False
        except EmbeddingUnavailable as exc:
            if time.monotonic() - t0 >= HUNG_S:  # it hung until the timeout: a retry would hang as long
                stats.embed_seconds += time.monotonic() - t0
                return None, f"unavailable (hung): {exc}", attempt, True
            error, unavailable = f"unavailable: {exc}", True
        except Exception as exc:  # noqa: BLE001 - a provider bug must cost one batch, not the run
            error, unavailable = f"{type(exc).__name__}: {exc}", False
        stats.embed_seconds += time.monotonic() - t0
        if attempt == 1:
            stats.retried_batches += 1
            sleep(0.5)
    return None, error, 2, unavailable


def vectors_problem(chunks: list[Any], documents: int, dims: int) -> str | None:
    """What is wrong with a provider's answer for `documents` texts, or None: every document needs
    at least one chunk, every vector `dims` finite numbers."""
    if len(chunks) != documents:
        return f"returned {len(chunks)} embeddings for {documents} documents"
    for doc_chunks in chunks:
        if not doc_chunks:
            return "returned no vector for a document"
        for chunk in doc_chunks:
            vector = np.asarray(chunk.vector, dtype=np.float64)
            if vector.shape != (dims,):
                return f"returned {vector.size}-dimensional vectors; the table holds {dims}-dimensional ones"
            if not np.isfinite(vector).all():
                return "returned a vector with NaN or infinite values"
    return None


def _failed(docs: list[dict[str, Any]], project: str, error: str, attempts: int) -> list[dict[str, Any]]:
    now = utcnow()
    return [{"doc_id": d["id"], "project": project, "content_hash": d["content_hash"], "error": error[:500],
             "attempts": attempts, "failed_at": now} for d in docs]
