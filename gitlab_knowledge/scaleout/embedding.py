"""`document_embeddings` fanned out: a graph-backed asset of the same key, partitions, pool and
checks as defs/assets/index.py's single step, whose embedding runs as one step per chunk.

    plan_embedding_chunks ──► embed_chunk × N (dynamic) ──► commit_embeddings (LanceDB pool)

The three ops call embeddings/fanout.py, which calls the single step's own plan/embed/commit
functions (embeddings/refresh.py): one code path. Only the commit writes LanceDB, inside
gitlab_knowledge_lancedb; no op writes DuckDB.
"""

from typing import Any

import dagster as dg

from gitlab_knowledge.defs.failures import said_plainly
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.embeddings import fanout
from gitlab_knowledge.embeddings.refresh import outage
from gitlab_knowledge.embeddings.tables import kept_models
from gitlab_knowledge.layers import EMBEDDINGS, LANCEDB_POOL
from gitlab_knowledge.workspace import Workspace

ASSET_KEY = EMBEDDINGS.asset


class FanoutConfig(dg.Config):
    everything: bool = False  # re-embed every document, not only changed ones
    provider: str = ""  # "" = the configured provider (and the other `embedding.models` tables too)
    model: str = ""
    chunk_documents: int = fanout.DEFAULT_CHUNK_DOCUMENTS  # documents per embedding step


@dg.op(ins={"search_documents": dg.In(dg.Nothing)},
       out={"plan": dg.Out(), "chunks": dg.DynamicOut()},
       description="Which documents each vector table needs, copied out of DuckDB and split into chunks.")
def plan_embedding_chunks(context: dg.OpExecutionContext, config: FanoutConfig,
                          workspace: dg.ResourceParam[Workspace]) -> Any:
    with said_plainly(context):
        provider = workspace.embedder(config.provider or None, config.model or None)
        models = [(provider.provider, provider.model)]
        if not config.provider:
            models += [(p.provider, p.model) for p in (workspace.embedder(o, m) for o, m in kept_models(workspace.config))]
        plan = fanout.plan_chunks(workspace, context.partition_key, models, run_id=context.run.run_id,
                                  everything=config.everything, chunk_documents=config.chunk_documents)
    context.log.info(f"{sum(len(m.plan.to_embed) for m in plan.models)} document(s) to embed in "
                     f"{len(plan.chunks)} chunk(s) of up to {config.chunk_documents}")
    yield dg.Output(plan, "plan")
    for spec in plan.chunks:
        yield dg.DynamicOutput(spec, mapping_key=spec.key, output_name="chunks")


@dg.op(description="Embed one chunk of documents into its staging file (writes no store).")
def embed_chunk(context: dg.OpExecutionContext, workspace: dg.ResourceParam[Workspace],
                spec: fanout.ChunkSpec) -> fanout.ChunkResult:
    with said_plainly(context):
        result = fanout.embed_chunk(workspace, spec, progress=workspace.progress_for(context.log))
    context.log.info(f"chunk {spec.index}: {result.stats.embedded} embedded in {result.stats.embed_seconds:.1f}s, "
                     f"{len(result.embedded.failures)} failed")
    return result


@dg.op(pool=LANCEDB_POOL, description="Write every chunk's vectors to LanceDB: the one writer.")
def commit_embeddings(context: dg.OpExecutionContext, workspace: dg.ResourceParam[Workspace],
                      plan: fanout.FanoutPlan, results: list[fanout.ChunkResult]) -> dg.Output[None]:
    with said_plainly(context):
        stats, *kept = fanout.commit_chunks(workspace, plan, results)
        down = outage([stats, *kept])  # the provider could not be reached: the run fails (as the single step)
        if down is not None:
            raise down
    for other in kept:
        context.log.info(f"{other.provider}/{other.model}: {other.embedded} embedded, {other.failed} failed, "
                         f"{other.deleted} deleted")
    if stats.failed:
        context.log.warning(f"{stats.failed} document(s) failed to embed and will be retried next run: "
                            f"{stats.last_error or ''}")
    return dg.Output(None, metadata={**stats.to_metadata(), "embeddings_chunk_steps": len(results)})


@dg.graph_asset(
    key=ASSET_KEY,
    ins={"search_documents": dg.AssetIn("search_documents", dagster_type=dg.Nothing)},
    partitions_def=project_partitions,
    group_name="index",
    kinds={"lancedb"},
    description=(
        "Vectors of every document whose text or model changed, in one LanceDB table per embedding "
        "model. Fanned out: the documents to embed are split into chunks, each embedded in its own step "
        "(on any worker) into a staging file; one step in the LanceDB pool commits them."
    ),
)
def document_embeddings(search_documents: Any) -> Any:
    plan, chunks = plan_embedding_chunks(search_documents)
    results = chunks.map(embed_chunk)
    return commit_embeddings(plan, results.collect())
