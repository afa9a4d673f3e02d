"""A step that fails for a reason a user can act on says that reason, not a generic step error.

Dagster shows an exception raised in a step as "Error occurred while executing op …" with the
cause further down; a `dg.Failure` is shown with its description as the failure itself. The
original exception rides along as the Failure's cause, and the in-process runner hands that cause
to the CLI, so exit codes still come from the exception's type.
"""

import contextlib
from collections.abc import Iterator

import dagster as dg

from gitlab_knowledge.errors import KnowledgeError


@contextlib.contextmanager
def said_plainly() -> Iterator[None]:
    try:
        yield
    except KnowledgeError as exc:
        raise dg.Failure(description=str(exc), metadata={"error": type(exc).__name__},
                         allow_retries=False) from exc


def original(exc: BaseException) -> BaseException:
    """What the step raised before `said_plainly` wrapped it."""
    if isinstance(exc, dg.Failure) and isinstance(exc.__cause__, KnowledgeError):
        return exc.__cause__
    return exc
