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
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.embeddings.provider import EmbeddingProvider
from gitlab_knowledge.embeddings.vectors import VectorStore, chunk_rows, metadata_of
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge.freshness import EntryState, compare
from gitlab_knowledge.layer_stats import LayerStats
from gitlab_knowledge.layers import EMBEDDINGS
from gitlab_knowledge.progress import NullProgress, SyncProgress
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

log = logging.getLogger(__name__)
FLUSH_CHUNKS = 2048
MAX_CONSECUTIVE_UNAVAILABLE = 3
HUNG_S = 5.0  # an unavailable provider that took this long to say so timed out: do not wait twice


@dataclass
class EmbedStats(LayerStats):
    PREFIX: ClassVar[str] = EMBEDDINGS.prefix
    ASSET: ClassVar[str] = EMBEDDINGS.asset
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


def outage(stats: list[EmbedStats]) -> EmbeddingUnavailable | None:
    """The error a run ends with when documents could not be embedded because the provider could
    not be reached (down, hung): the run fails, so the UI and the sensor's backoff see a failed
    run, not a success with nothing embedded. Documents failed by a provider that answered
    nonsense are not an outage: they are recorded and the run succeeds. The exception carries the
    stats (`embed_stats`, primary model first) and their metadata for the failure event."""
    down = [s for s in stats if s.failed and any(e.startswith("unavailable") for e in s.errors)]
    if not down:
        return None
    failed = sum(s.failed for s in down)
    exc = EmbeddingUnavailable(f"{failed} document(s) could not be embedded ({down[0].last_error}); they stay "
                               "searchable by keyword and are retried on the next run")
    exc.embed_stats = stats  # type: ignore[attr-defined]
    exc.failure_metadata = down[0].to_metadata()  # type: ignore[attr-defined]
    return exc


def plan(con: Any, store: VectorStore, project: str, everything: bool) -> tuple[list[str], list[str], list[str], int]:
    """(ids to embed, ids needing a metadata rewrite, ids to delete, document count)."""
    docs = con.execute("SELECT id, content_hash, meta_hash FROM documents WHERE project_path = ?", [project]).fetchall()
    return _plan_of(docs, store.document_state(project), everything)


def plan_many(con: Any, store: VectorStore, projects: Sequence[str], everything: bool) -> "dict[str, Plan]":
    """`plan` of each of `projects`, from one DuckDB query and one vector-table scan."""
    states = store.document_states(projects)
    docs: dict[str, list[Any]] = {p: [] for p in projects}
    for row in con.execute("SELECT project_path, id, content_hash, meta_hash FROM documents "
                           "WHERE project_path IN (SELECT unnest(?::TEXT[]))", [list(projects)]).fetchall():
        docs[row[0]].append(row[1:])
    return {p: Plan(*_plan_of(docs[p], states.get(p, {}), everything)) for p in projects}


def _plan_of(docs: list[Any], state: dict[str, tuple[str, str]],
             everything: bool) -> tuple[list[str], list[str], list[str], int]:
    comparison = compare({d[0]: (d[1], d[2]) for d in docs}, state)
    if everything:
        return [d[0] for d in docs], [], comparison.orphaned, len(docs)
    embed = comparison.ids(EntryState.TEXT_CHANGED, EntryState.MISSING, EntryState.FAILED)
    return embed, comparison.ids(EntryState.METADATA_CHANGED), comparison.orphaned, len(docs)


@dataclass
class Plan:
    """What one model's vector table needs for one project (`plan`, as a value)."""

    to_embed: list[str]
    meta_only: list[str]
    stale: list[str]
    documents: int

    @property
    def wanted(self) -> list[str]:
        """The documents to copy out of DuckDB: those to embed and those whose metadata changed."""
        return self.to_embed + self.meta_only


@dataclass
class Embedded:
    """What embedding some documents produced besides the vector rows (which went to `write`)."""

    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # unchanged text: metadata to rewrite
    failures: list[dict[str, Any]] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    dims: int | None = None

    def add(self, other: "Embedded") -> None:
        self.metadata.update(other.metadata)
        self.failures += other.failures
        self.succeeded += other.succeeded
        self.dims = self.dims or other.dims


def plan_documents(workspace: Workspace, store: VectorStore, project: str, everything: bool, staged: Path) -> Plan:
    """Step 1 (read-only): decide what the vector table needs, and copy the wanted documents to
    the Parquet file `staged` in one short DuckDB read."""
    with workspace.read(wait=120.0) as con:
        plan_ = Plan(*plan(con, store, project, everything))
        if plan_.wanted:
            stage_documents(con, plan_.wanted, staged)
    return plan_


def embed_staged(staged: Path, embed_ids: Container[str], provider: EmbeddingProvider, project: str,
                 stats: EmbedStats, write: Callable[[list[dict[str, Any]], int], None], *, dims: int | None,
                 batch_size: int, progress: SyncProgress, sleep: Callable[[float], None] = time.sleep) -> Embedded:
    """Step 2 (writes no store): embed the staged documents in `embed_ids`, handing their vector
    rows to `write(rows, dims)` every FLUSH_CHUNKS rows; the other staged documents only had their
    metadata change. The single-step refresh writes straight to LanceDB, a fan-out chunk to its
    staging file."""
    out = Embedded(dims=dims)
    pending: list[dict[str, Any]] = []
    unavailable_streak = 0
    for docs in iter_documents(staged, batch_size):
        for doc in docs:
            if doc["id"] not in embed_ids:
                out.metadata[doc["id"]] = metadata_of(doc)
        docs = [d for d in docs if d["id"] in embed_ids]
        if not docs:
            continue
        if unavailable_streak >= MAX_CONSECUTIVE_UNAVAILABLE:
            out.failures += _failed(docs, project, stats.errors[-1], 0)
            progress.advance(project, "embeddings", len(docs))
            continue
        chunks, error, attempts, unavailable = _embed_with_retry(provider, docs, stats, sleep)
        if chunks is not None:
            out.dims = out.dims or provider.dims
            problem = vectors_problem(chunks, len(docs), out.dims)
            if problem is not None:
                chunks, error, unavailable = None, f"{provider.provider}/{provider.model} {problem}", False
        if chunks is None:
            hung = unavailable and error.startswith("unavailable (hung)")
            unavailable_streak = (MAX_CONSECUTIVE_UNAVAILABLE if hung
                                  else unavailable_streak + 1 if unavailable else 0)
            out.failures += _failed(docs, project, error, attempts)
            stats.errors.append(error)
            # INFO: the run says it once (embed's warning per project, the asset's log), not once a
            # batch on a terminal's stderr (a down provider made that a line per 32 documents).
            log.info("embedding batch of %d documents failed: %s", len(docs), error)
        else:
            unavailable_streak = 0
            now = utcnow()
            for doc, doc_chunks in zip(docs, chunks, strict=True):
                pending += chunk_rows(doc, doc_chunks, provider.provider, provider.model, now)
                out.succeeded.append(doc["id"])
            stats.embedded += len(docs)
            stats.chunks += sum(len(c) for c in chunks)
        if len(pending) >= FLUSH_CHUNKS:
            write(pending, out.dims or provider.dims)
            pending = []
        progress.advance(project, "embeddings", len(docs))
    if pending:
        write(pending, out.dims or provider.dims)
    return out


def commit(store: VectorStore, embedded: Embedded, stats: EmbedStats) -> None:
    """Step 3 (inside the LanceDB pool, after the vector rows are written): rewrite changed
    metadata, record and clear failures, compact."""
    stats.metadata_updated = store.update_metadata(embedded.metadata)
    store.clear_failures(embedded.succeeded)
    store.record_failures(embedded.failures)
    stats.failed = len(embedded.failures)
    if stats.embedded or stats.metadata_updated:
        store.optimize()


def delete_stale(store: VectorStore, plan_: Plan, stats: EmbedStats) -> None:
    """Remove the vectors of documents that are gone (inside the LanceDB pool); compact when that
    is all there is to do."""
    if plan_.stale:
        store.delete_docs(plan_.stale)
        stats.deleted = len(plan_.stale)
        if not plan_.wanted:
            store.optimize()


def refresh(workspace: Workspace, project: str, *, provider: EmbeddingProvider | None = None,
            everything: bool = False, progress: SyncProgress | None = None, batch_size: int | None = None,
            sleep: Callable[[float], None] = time.sleep) -> EmbedStats:
    """The embeddings layer's entry point: embed one project's new and changed documents with
    `provider` (default: the workspace's configured embedder), in this process: plan, embed
    (writing each batch's vectors as it goes), commit. embeddings/fanout.py runs the same three
    steps with the embedding split over workers."""
    return refresh_many(workspace, [project], provider=provider, everything=everything, progress=progress,
                        batch_size=batch_size, sleep=sleep)[project]


def refresh_many(workspace: Workspace, projects: Sequence[str], *, provider: EmbeddingProvider | None = None,
                 everything: bool = False, progress: SyncProgress | None = None, batch_size: int | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> dict[str, EmbedStats]:
    """`refresh` of every project in `projects` as one: one plan (one DuckDB read, one vector-table
    scan), every project's pending documents embedded in full batches, one commit (one metadata
    rewrite, one compaction). A batch of many small projects paid a LanceDB write, version and
    optimize, and a part-filled embedding batch, once per project. Each project's stats count its
    own documents; `embed_seconds` and `duration_s` are its share (by documents embedded, and
    evenly) of the whole."""
    started = time.monotonic()
    provider = provider or workspace.embedder()
    progress = progress or workspace.progress or NullProgress()
    store = workspace.vectors(provider.provider, provider.model)
    out = {p: EmbedStats(provider=provider.provider, model=provider.model) for p in projects}
    batch_size = batch_size or workspace.config.embedding.batch_size
    dims = store.dims()  # an existing table's dimension wins: vectors of another size cannot join it
    whole = EmbedStats(provider=provider.provider, model=provider.model)
    with workspace.scratch("gk-embed-") as tmp:
        staged = tmp / "documents.parquet"
        with workspace.read(wait=120.0) as con:
            plans = plan_many(con, store, projects, everything)
            wanted = [doc for p in projects for doc in plans[p].wanted]
            if wanted:
                stage_documents(con, wanted, staged)
        every = Plan([d for p in projects for d in plans[p].to_embed], [d for p in projects for d in plans[p].meta_only],
                     [d for p in projects for d in plans[p].stale], sum(plans[p].documents for p in projects))
        for project, plan_ in plans.items():
            stats = out[project]
            stats.documents, stats.to_embed = plan_.documents, len(plan_.to_embed)
            stats.unchanged = plan_.documents - len(plan_.wanted)
            stats.deleted = len(plan_.stale)
        delete_stale(store, every, whole)
        if every.wanted:
            label = projects[0] if len(projects) == 1 else f"{len(projects)} projects"
            progress.resource_started(label, "embeddings", len(every.to_embed))
            embedded = embed_staged(staged, set(every.to_embed), provider, label, whole, store.replace_docs,
                                    dims=dims, batch_size=batch_size, progress=progress, sleep=sleep)
            commit(store, embedded, whole)
            _share(embedded, whole, plans, out)
    elapsed = round(time.monotonic() - started, 3)
    for stats in out.values():
        stats.duration_s = elapsed if len(out) == 1 else round(elapsed / len(out), 3)
    return out


def _share(embedded: Embedded, whole: EmbedStats, plans: "dict[str, Plan]", out: dict[str, EmbedStats]) -> None:
    """Each project's part of what one embedding pass over many projects did."""
    owner = {doc: p for p, plan_ in plans.items() for doc in plan_.wanted}
    for doc in embedded.succeeded:
        out[owner[doc]].embedded += 1
    for failure in embedded.failures:
        out[owner[failure["doc_id"]]].failed += 1
    for doc in embedded.metadata:
        out[owner[doc]].metadata_updated += 1
    for stats in out.values():
        if stats.failed:
            stats.errors = list(whole.errors)
        if len(out) == 1:
            stats.chunks, stats.retried_batches, stats.embed_seconds = whole.chunks, whole.retried_batches, whole.embed_seconds
            stats.metadata_updated = whole.metadata_updated
        elif whole.embedded:
            stats.embed_seconds = whole.embed_seconds * stats.embedded / whole.embedded
            stats.chunks = round(whole.chunks * stats.embedded / whole.embedded)


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
    return [{"doc_id": d["id"], "project": d.get("project_path") or project, "content_hash": d["content_hash"], "error": error[:500],
             "attempts": attempts, "failed_at": now} for d in docs]
