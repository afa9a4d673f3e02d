"""Index layer: embeddings (LanceDB) and the lexical index (Tantivy), both from the documents."""

import dagster as dg

from gitlab_knowledge.defs.assets.documents import search_documents
from gitlab_knowledge.defs.failures import said_plainly
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.embeddings.refresh import outage
from gitlab_knowledge.embeddings.tables import kept_models
from gitlab_knowledge.layers import EMBEDDINGS, LEXICAL
from gitlab_knowledge.workspace import Workspace


class EmbedRunConfig(dg.Config):
    everything: bool = False  # re-embed every document, not only changed ones
    provider: str = ""  # "" = the configured provider; "embedded" or "ollama" builds that model's table
    model: str = ""


@dg.asset(
    key=EMBEDDINGS.asset,
    deps=[search_documents],
    partitions_def=project_partitions,
    group_name=EMBEDDINGS.group,
    kinds={"lancedb"},
    pool=EMBEDDINGS.pool,
    description=(
        "Vectors of every document whose text or model changed, in one LanceDB table per embedding "
        "model, with the metadata search filters on. Long texts are embedded as overlapping chunks. "
        "A failing batch is retried once, then recorded in embedding_failures and retried next run."
    ),
)
def document_embeddings(context: dg.AssetExecutionContext, config: EmbedRunConfig,
                        workspace: dg.ResourceParam[Workspace]) -> dg.MaterializeResult:
    with said_plainly(context, EMBEDDINGS, workspace):
        provider = workspace.embedder(config.provider or None, config.model or None)
        stats = EMBEDDINGS.refresh(workspace, context.partition_key, provider=provider, everything=config.everything,
                                   progress=workspace.progress_for(context.log))
        every = [stats]
        if not config.provider:
            # The other models of `embedding.models` are kept current too (search may switch to one).
            for other, model in kept_models(workspace.config):
                kept = EMBEDDINGS.refresh(workspace, context.partition_key, provider=workspace.embedder(other, model),
                                          everything=config.everything, progress=workspace.progress_for(context.log))
                every.append(kept)
                context.log.info(f"{kept.provider}/{kept.model}: {kept.embedded} embedded, {kept.failed} failed, "
                                 f"{kept.deleted} deleted")
        # The provider could not be reached: the step fails (the failures are recorded, the lexical
        # index beside it still runs), so the run is not a success that embedded nothing.
        down = outage(every)
        if down is not None:
            raise down
    if stats.failed:
        context.log.warning(f"{stats.failed} document(s) failed to embed and will be retried next run: "
                            f"{stats.last_error or ''}")
    return dg.MaterializeResult(metadata=stats.to_metadata())


@dg.asset(
    key=LEXICAL.asset,
    deps=[search_documents],
    partitions_def=project_partitions,
    group_name=LEXICAL.group,
    kinds={"tantivy"},
    pool=LEXICAL.pool,
    # Before the embeddings, its sibling: an embedding outage fails that step, and a run in this
    # process stops at its first failed step, so the keyword index is current during an outage.
    op_tags={"dagster/priority": "1"},
    description=(
        "BM25 index (Tantivy) over title and body with English stemming, a field of code identifiers "
        "(snake_case, camelCase, paths, dotted names split and kept whole), issue/MR references, and "
        "every search filter. Kept in step with the documents: upserts and deletes in one commit."
    ),
)
def lexical_index(context: dg.AssetExecutionContext, workspace: dg.ResourceParam[Workspace]) -> dg.MaterializeResult:
    with said_plainly(context, LEXICAL, workspace):
        stats = LEXICAL.refresh(workspace, context.partition_key)
    return dg.MaterializeResult(metadata=stats.to_metadata())
