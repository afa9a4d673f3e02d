"""A step that fails for a reason a user can act on says that reason, not a generic step error.

Dagster shows an exception raised in a step as "Error occurred while executing op …" with the
cause further down; a `dg.Failure` is shown with its description as the failure itself. The
original exception rides along as the Failure's cause, and the in-process runner hands that cause
to the CLI, so exit codes still come from the exception's type.

A full disk, a read-only mount or a denied write reaches a step in many wrappings (an OSError,
DuckDB's IOException, a Lance or Tantivy error, a StoreError the store already worded): each
becomes one StoreError naming the layer, the path and what the disk refused, whichever library
met it, so every layer says it the same way (and the runner stops: the next project would meet
the same disk).
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from gitlab_knowledge.errors import KnowledgeError, StoreError, disk_failure
from gitlab_knowledge.layers import EMBEDDINGS, LEXICAL, Layer
from gitlab_knowledge.workspace import Workspace


@contextlib.contextmanager
def said_plainly(layer: Layer | None = None, workspace: Workspace | None = None) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        # A KnowledgeError other than the store's is about something else (GitLab's own words).
        ours = layer is not None and (isinstance(exc, StoreError) or not isinstance(exc, KnowledgeError))
        worded = _on_disk(exc, layer, workspace) if ours and layer is not None else None
        if worded is None and not isinstance(exc, KnowledgeError):
            raise
        error: Exception = worded or exc
        raise dg.Failure(description=str(error), metadata={"error": type(error).__name__},
                         allow_retries=False) from error


def _on_disk(exc: Exception, layer: Layer, workspace: Workspace | None) -> StoreError | None:
    found = disk_failure(exc)
    if found is None:
        return None
    cause, path = found
    store = _store_of(layer, workspace) if workspace is not None else None
    if store is not None and (path is None or Path(path).is_relative_to(store)):
        path = str(store)  # the index directory, not the name of a file it was about to write
    error = StoreError(f"the {layer.name} layer cannot write {path or 'its store'}: {cause}")
    stats = getattr(exc, "raw_stats", None)
    if stats is not None:  # what the raw step did before the disk stopped it
        error.raw_stats = stats  # type: ignore[attr-defined]
    return error


def _store_of(layer: Layer, workspace: Workspace) -> Path:
    config = workspace.config
    if layer is EMBEDDINGS:
        return config.lancedb_dir
    if layer is LEXICAL:
        return config.tantivy_dir
    return config.duckdb_path


def original(exc: BaseException) -> BaseException:
    """What the step raised before `said_plainly` wrapped it."""
    if isinstance(exc, dg.Failure) and isinstance(exc.__cause__, KnowledgeError):
        return exc.__cause__
    return exc
