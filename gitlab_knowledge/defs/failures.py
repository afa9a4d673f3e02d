"""A step that fails for a reason a user can act on says that reason, not a generic step error.

Dagster shows an exception raised in a step as "Error occurred while executing op …" with the
cause further down; a `dg.Failure` is shown with its description as the failure itself. The
original exception rides along as the Failure's cause, and the in-process runner hands that cause
to the CLI, so exit codes still come from the exception's type.

An expected failure (GitLab unreachable or refusing, the store not writable, the embedding provider
down: a `KnowledgeError`) is one line in the run's event log, without a Python stack trace: the
trace is of Dagster's frames and ours, and says nothing the line does not. The run also carries the
line as a tag (`FAILURE_TAG`), which the UI's run list shows. Anything else is a bug and keeps its
trace.

A full disk, a read-only mount or a denied write reaches a step in many wrappings (an OSError,
DuckDB's IOException, a Lance or Tantivy error, a StoreError the store already worded): each
becomes one StoreError naming the layer, the path and what the disk refused, whichever library
met it, so every layer says it the same way (and the runner stops: the next project would meet
the same disk).
"""

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from gitlab_knowledge.errors import KnowledgeError, StoreError, disk_failure
from gitlab_knowledge.layers import EMBEDDINGS, LEXICAL, Layer
from gitlab_knowledge.workspace import Workspace

FAILURE_TAG = "gitlab_knowledge/failure"
MAX_DESCRIPTION = 1000

try:  # Dagster records a step failure's error from the exception; see `_Plain`.
    from dagster._core.errors import DagsterUserCodeProcessError
    from dagster._utils.error import SerializableErrorInfo
except ImportError:  # pragma: no cover - another Dagster: plain Failures (with a trace) still say the cause
    DagsterUserCodeProcessError = None  # type: ignore[assignment,misc]


def one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_DESCRIPTION else line[:MAX_DESCRIPTION - 1] + "…"


def plain_failure(description: str, metadata: Mapping[str, Any] | None = None,
                  cls_name: str = "Failure") -> dg.Failure:
    """A `dg.Failure` whose event-log entry is `description` alone, with no stack trace.

    Dagster builds a step failure's error record from the raised exception's traceback, except for
    an error that already carries the record of a failure in another process
    (`DagsterUserCodeProcessError`): that record is used as is. A Failure that is also one, carrying
    a record with no stack, is caught as a Failure (description and metadata shown) and recorded
    without frames.
    """
    description = one_line(description)
    if DagsterUserCodeProcessError is None:
        return dg.Failure(description=description, metadata=dict(metadata or {}), allow_retries=False)
    return _Plain(description, dict(metadata or {}), cls_name)


if DagsterUserCodeProcessError is not None:
    class _Plain(dg.Failure, DagsterUserCodeProcessError):
        def __init__(self, description: str, metadata: dict[str, Any], cls_name: str) -> None:
            # Neither base's __init__ can run (each passes its own arguments up the shared MRO):
            # the Failure's fields are those of an ordinary Failure, built to normalize them.
            Exception.__init__(self, description)
            plain = dg.Failure(description=description, metadata=metadata, allow_retries=False)
            self.description, self.metadata, self.allow_retries = plain.description, plain.metadata, False
            self.user_code_process_error_infos = [SerializableErrorInfo(
                message=description, stack=[], cls_name=cls_name, cause=None, context=None)]


@contextlib.contextmanager
def said_plainly(context: dg.AssetExecutionContext | dg.OpExecutionContext | None = None,
                 layer: Layer | None = None, workspace: Workspace | None = None) -> Iterator[None]:
    """Turn a `KnowledgeError` raised inside, or the disk refusing a write of `layer`, into a
    one-line Failure (and, given the step's `context`, tag the run with that line)."""
    try:
        yield
    except Exception as exc:
        # A KnowledgeError other than the store's is about something else (GitLab's own words).
        ours = layer is not None and (isinstance(exc, StoreError) or not isinstance(exc, KnowledgeError))
        worded = _on_disk(exc, layer, workspace) if ours and layer is not None else None
        if worded is None and not isinstance(exc, KnowledgeError):
            raise
        error: Exception = worded or exc
        failure = plain_failure(str(error), {"error": type(error).__name__, **_extra_metadata(error)},
                                type(error).__name__)
        if context is not None:
            tag_cause(context, failure.description or "")
        raise failure from error


def _extra_metadata(exc: Exception) -> dict[str, Any]:
    return dict(getattr(exc, "failure_metadata", None) or {})


def tag_cause(context: dg.AssetExecutionContext | dg.OpExecutionContext, line: str) -> None:
    """The run's tag `FAILURE_TAG` says why it failed (best effort: a store that cannot take a tag
    must not hide the failure itself)."""
    with contextlib.suppress(Exception):
        context.instance.add_run_tags(context.run.run_id, {FAILURE_TAG: one_line(line)})


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
