"""A batch's two index layers, each for all its projects at once (defs/many_projects.py `carry`
calls them through `_index_layer`): the keyword index and the vectors, one plan, one write and one
commit each for the batch, each project's own stats as a partition run would record them."""

from typing import Any

from gitlab_knowledge.embeddings.ahead import Ahead
from gitlab_knowledge.embeddings.refresh import outage
from gitlab_knowledge.embeddings.tables import kept_models
from gitlab_knowledge.progress import SyncProgress
from gitlab_knowledge.workspace import Workspace


def lexical_layer(workspace: Workspace, projects: list[str]) -> dict[str, dict[str, Any] | BaseException]:
    from gitlab_knowledge.lexical.refresh import refresh_many

    return {p: stats.to_metadata() for p, stats in refresh_many(workspace, projects).items()}


def embeddings_layer(workspace: Workspace, projects: list[str], progress: SyncProgress | None,
                log: Any, *, ahead: Ahead | None = None) -> dict[str, dict[str, Any] | BaseException]:
    """The configured model's vectors, and those of the other models `embedding.models` keeps
    current, for every project at once; a project whose documents could not be embedded because
    the provider was down fails this layer (its failures are recorded and retried), as its own run's
    embeddings step would; the configured model's from what was embedded `ahead` where it can."""
    from gitlab_knowledge.embeddings.refresh import refresh_many

    provider = ahead.finish(workspace.embedder()) if ahead is not None else workspace.embedder()
    primary = refresh_many(workspace, projects, provider=provider, progress=progress)
    if ahead is not None and log is not None:
        log.info(f"embeddings: {ahead.summary(provider)}")
    kept = [refresh_many(workspace, projects, provider=workspace.embedder(other, model), progress=progress)
            for other, model in kept_models(workspace.config)]
    out: dict[str, dict[str, Any] | BaseException] = {}
    for project in projects:
        stats = primary[project]
        down = outage([stats, *(k[project] for k in kept)])
        out[project] = down if down is not None else stats.to_metadata()
        if stats.failed and down is None and log is not None:
            log.warning(f"{project}: {stats.failed} document(s) failed to embed and will be retried next run: "
                        f"{stats.last_error or ''}")
    return out
