"""Index layer: embeddings (LanceDB) and the lexical index (Tantivy), both from the documents."""

import dagster as dg

from gitlab_knowledge.defs.assets.documents import search_documents
from gitlab_knowledge.defs.assets.pools import LANCEDB_POOL, TANTIVY_POOL
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.defs.reporting import progress_for
from gitlab_knowledge.defs.resources import KnowledgeSettings
from gitlab_knowledge.embeddings.provider import get_provider
from gitlab_knowledge.embeddings.refresh import refresh_embeddings
from gitlab_knowledge.lexical.refresh import refresh_lexical


class EmbedRunConfig(dg.Config):
    everything: bool = False  # re-embed every document, not only changed ones
    provider: str = ""  # "" = the configured provider; "embedded" or "ollama" builds that model's table
    model: str = ""


@dg.asset(
    key="document_embeddings",
    deps=[search_documents],
    partitions_def=project_partitions,
    group_name="index",
    kinds={"lancedb"},
    pool=LANCEDB_POOL,
    description=(
        "Vectors of every document whose text or model changed, in one LanceDB table per embedding "
        "model, with the metadata search filters on. Long texts are embedded as overlapping chunks. "
        "A failing batch is retried once, then recorded in embedding_failures and retried next run."
    ),
)
def document_embeddings(context: dg.AssetExecutionContext, config: EmbedRunConfig,
                        settings: KnowledgeSettings) -> dg.MaterializeResult:
    loaded = settings.load()
    provider = get_provider(loaded, config.provider or None, config.model or None)
    stats = refresh_embeddings(loaded, context.partition_key, provider=provider, everything=config.everything,
                               progress=progress_for(context))
    if stats.failed:
        context.log.warning(f"{stats.failed} document(s) failed to embed and will be retried next run: "
                            f"{stats.errors[-1] if stats.errors else ''}")
    metadata = {f"embeddings_{k}": v for k, v in stats.as_dict().items() if k != "errors"}
    if stats.errors:
        metadata["embeddings_last_error"] = stats.errors[-1]
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    key="lexical_index",
    deps=[search_documents],
    partitions_def=project_partitions,
    group_name="index",
    kinds={"tantivy"},
    pool=TANTIVY_POOL,
    description=(
        "BM25 index (Tantivy) over title and body with English stemming, a field of code identifiers "
        "(snake_case, camelCase, paths, dotted names split and kept whole), issue/MR references, and "
        "every search filter. Kept in step with the documents: upserts and deletes in one commit."
    ),
)
def lexical_index(context: dg.AssetExecutionContext, settings: KnowledgeSettings) -> dg.MaterializeResult:
    stats = refresh_lexical(settings.load(), context.partition_key)
    return dg.MaterializeResult(metadata={f"lexical_{k}": v for k, v in stats.as_dict().items()})
