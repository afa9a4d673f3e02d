"""The embeddings layer fanned out: the same plan → embed → commit as `refresh.refresh`, with the
embedding split into chunks that run as separate steps, on as many workers as there are.

1. `plan_chunks` (reads DuckDB and LanceDB, writes neither): plans each model's table exactly as
   `refresh` does, copies the wanted documents out of DuckDB in one short read, and splits that
   Parquet file into chunk files of `chunk_documents` documents each, under a staging directory
   in the data directory (the volume every worker mounts).
2. `embed_chunk` (writes no store): embeds one chunk's documents with the same provider and the
   same batches, retries and checks as `refresh` (refresh.embed_staged), and writes the vector rows
   to the chunk's own Parquet staging file, in the vector table's schema.
3. `commit_chunks` (one writer, inside the LanceDB pool): deletes the vectors of documents that are
   gone, writes every chunk's staged rows to LanceDB through `VectorStore.replace_docs` (the write
   path of the single step), rewrites changed metadata, records and clears failures, compacts,
   and removes the staging directory.

Only the embedding itself (the CPU-heavy part, 20–50 documents/s per 2-core worker) is spread;
DuckDB and LanceDB keep one writer each. Differences from the single step: a chunk counts its own
run of provider-unreachable batches (a dead provider costs each chunk up to three tries instead of
the whole run three), and vectors reach LanceDB at the commit, not batch by batch.
"""

import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gitlab_knowledge.embeddings.refresh import (
    FLUSH_CHUNKS,
    Embedded,
    EmbedStats,
    Plan,
    commit,
    delete_stale,
    embed_staged,
    plan_documents,
)
from gitlab_knowledge.embeddings.vectors import checked_rows, table_name
from gitlab_knowledge.progress import NullProgress, SyncProgress
from gitlab_knowledge.workspace import Workspace, private_dir

STAGING = "embed-staging"  # under the data directory: every worker mounts it
DEFAULT_CHUNK_DOCUMENTS = 1000  # ~20–50 s of embedding on a 2-core worker: a step's overhead is ~1 s
STALE_STAGING_S = 7 * 24 * 3600  # a failed run's staging, kept for re-execution from failure, then removed


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk step's work: embed `embed_ids` of the documents in the Parquet file `documents`."""

    project: str
    provider: str
    model: str
    index: int
    documents: str
    embed_ids: tuple[str, ...]
    dims: int | None  # the existing table's vector size (None: no table yet, the provider's)
    vectors: str  # where the chunk writes its vector rows

    @property
    def key(self) -> str:
        """A Dagster mapping key: letters, digits and underscores."""
        return re.sub(r"[^A-Za-z0-9_]", "_", f"{table_name(self.provider, self.model)}_{self.index:05d}")


@dataclass
class ModelPlan:
    provider: str
    model: str
    plan: Plan
    dims: int | None


@dataclass
class FanoutPlan:
    project: str
    staging: str
    models: list[ModelPlan]
    chunks: list[ChunkSpec]


@dataclass
class ChunkResult:
    spec: ChunkSpec
    embedded: Embedded
    stats: EmbedStats
    rows: int = 0  # vector rows in spec.vectors (0: no file)


@dataclass
class _StagingWriter:
    """`embed_staged`'s `write`: append checked vector rows to one Parquet file."""

    path: Path
    name: str
    rows: int = 0
    _writer: Any = field(default=None, repr=False)

    def write(self, rows: list[dict[str, Any]], dims: int) -> None:
        data = checked_rows(rows, dims, self.name)  # the check replace_docs makes, before anything is staged
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, data.schema)
        self._writer.write_table(data)
        self.rows += data.num_rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def staging_dir(workspace: Workspace, run_id: str) -> Path:
    return workspace.config.data_dir / STAGING / re.sub(r"[^A-Za-z0-9_-]", "_", run_id)


def split_staged(staged: Path, chunk_documents: int, out_dir: Path, prefix: str) -> Iterator[tuple[Path, list[str]]]:
    """Split the staged documents (sorted by id) into files of `chunk_documents` rows each:
    (path, the ids in it), in order. Streams: never more than one batch in memory."""
    if chunk_documents < 1:
        raise ValueError("chunk_documents must be at least 1")
    source = pq.ParquetFile(staged)
    writer: pq.ParquetWriter | None = None
    ids: list[str] = []
    path, index = out_dir, 0
    for batch in source.iter_batches(batch_size=min(chunk_documents, 4096)):
        while batch.num_rows:
            if writer is None:
                path = out_dir / f"{prefix}-{index:05d}.parquet"
                writer, ids = pq.ParquetWriter(path, source.schema_arrow), []
            take = min(chunk_documents - len(ids), batch.num_rows)
            part, batch = batch.slice(0, take), batch.slice(take)
            writer.write_table(pa.Table.from_batches([part]))
            ids += part.column("id").to_pylist()
            if len(ids) == chunk_documents:
                writer.close()
                writer = None
                index += 1
                yield path, ids
    if writer is not None:
        writer.close()
        yield path, ids


def plan_chunks(workspace: Workspace, project: str, models: Sequence[tuple[str, str]], *, run_id: str,
                everything: bool = False, chunk_documents: int = DEFAULT_CHUNK_DOCUMENTS) -> FanoutPlan:
    """Step 1 for every (provider, model) table: what each needs, and its embedding in chunks."""
    _remove_stale_staging(workspace.config.data_dir / STAGING)
    staging = private_dir(staging_dir(workspace, run_id))
    out = FanoutPlan(project=project, staging=str(staging), models=[], chunks=[])
    for provider, model in models:
        store = workspace.vectors(provider, model)
        dims = store.dims()  # as in refresh: an existing table's dimension wins
        name = table_name(provider, model)
        staged = staging / f"{name}.parquet"
        plan_ = plan_documents(workspace, store, project, everything, staged)
        out.models.append(ModelPlan(provider, model, plan_, dims))
        if not plan_.wanted:
            continue
        embed = set(plan_.to_embed)
        for index, (path, ids) in enumerate(split_staged(staged, chunk_documents, staging, name)):
            out.chunks.append(ChunkSpec(project, provider, model, index, str(path),
                                        tuple(i for i in ids if i in embed), dims,
                                        str(staging / f"{name}-{index:05d}.vectors.parquet")))
        staged.unlink()
    return out


def embed_chunk(workspace: Workspace, spec: ChunkSpec, *, batch_size: int | None = None,
                progress: SyncProgress | None = None, sleep: Callable[[float], None] = time.sleep) -> ChunkResult:
    """Step 2: embed one chunk into its staging file (no store is written)."""
    started = time.monotonic()
    provider = workspace.embedder(spec.provider, spec.model)
    stats = EmbedStats(provider=provider.provider, model=provider.model, to_embed=len(spec.embed_ids))
    progress = progress or workspace.progress or NullProgress()
    progress.resource_started(spec.project, "embeddings", len(spec.embed_ids))
    writer = _StagingWriter(Path(spec.vectors), table_name(spec.provider, spec.model))
    try:
        embedded = embed_staged(Path(spec.documents), set(spec.embed_ids), provider, spec.project, stats,
                                writer.write, dims=spec.dims,
                                batch_size=batch_size or workspace.config.embedding.batch_size,
                                progress=progress, sleep=sleep)
    finally:
        writer.close()
    stats.duration_s = time.monotonic() - started
    return ChunkResult(spec, embedded, stats, writer.rows)


def commit_chunks(workspace: Workspace, plan: FanoutPlan, results: Sequence[ChunkResult]) -> list[EmbedStats]:
    """Step 3, the one writer: each model's stale deletes, staged vectors, metadata and failures
    into LanceDB; one EmbedStats per model, in the plan's order. Removes the staging directory
    once everything is written (a failed commit leaves it for a re-execution; `plan_chunks`
    removes what a run left more than STALE_STAGING_S ago)."""
    out = []
    for model_plan in plan.models:
        started = time.monotonic()
        store = workspace.vectors(model_plan.provider, model_plan.model)
        stats = EmbedStats(provider=model_plan.provider, model=model_plan.model,
                           documents=model_plan.plan.documents, to_embed=len(model_plan.plan.to_embed),
                           unchanged=model_plan.plan.documents - len(model_plan.plan.wanted))
        delete_stale(store, model_plan.plan, stats)
        embedded = Embedded(dims=model_plan.dims)
        mine = sorted((r for r in results if (r.spec.provider, r.spec.model) == (model_plan.provider, model_plan.model)),
                      key=lambda r: r.spec.index)
        for result in mine:
            _merge(stats, result.stats)
            embedded.add(result.embedded)
            if result.rows:
                staged = pq.ParquetFile(result.spec.vectors)
                dims = staged.schema_arrow.field("vector").type.list_size
                for batch in staged.iter_batches(batch_size=FLUSH_CHUNKS):
                    store.replace_docs(batch.to_pylist(), dims)
        if model_plan.plan.wanted:
            commit(store, embedded, stats)
        stats.duration_s = time.monotonic() - started + sum(r.stats.duration_s for r in mine)
        out.append(stats)
    shutil.rmtree(plan.staging, ignore_errors=True)
    return out


def _remove_stale_staging(root: Path) -> None:
    if not root.is_dir():
        return
    for entry in root.iterdir():
        try:
            if entry.is_dir() and time.time() - entry.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


def _merge(total: EmbedStats, part: EmbedStats) -> None:
    total.embedded += part.embedded
    total.chunks += part.chunks
    total.retried_batches += part.retried_batches
    total.embed_seconds += part.embed_seconds
    total.errors += part.errors

