"""Errors a user sees as one line.

Every failure a user can cause or fix (bad config, wrong token, GitLab down, store busy) is a
`KnowledgeError`: the CLI prints its message on one line and exits with `exit_code`, never a
traceback. Messages must not contain secrets; `redact` is applied to them anyway.
"""


class KnowledgeError(Exception):
    """A failure with a message meant for the user."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        from gitlab_knowledge.redact import redact

        return redact(self.message)


class ConfigError(KnowledgeError):
    """Missing or invalid configuration (names the field)."""

    exit_code = 2


class UsageError(KnowledgeError):
    """Bad command-line input."""

    exit_code = 2


class AuthError(KnowledgeError):
    """GitLab rejected the token."""

    exit_code = 3


class GitLabError(KnowledgeError):
    """GitLab answered with an error, or could not be reached after retries."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(GitLabError):
    """GitLab answered 404."""


class StoreBusyError(KnowledgeError):
    """The DuckDB file is held by a writer (a sync) for longer than we were willing to wait."""

    exit_code = 4


class SyncInProgressError(KnowledgeError):
    """Single-flight: another sync of the same project is running."""

    exit_code = 5


class StoreError(KnowledgeError):
    """The local store cannot be written or read (disk full, read-only, corrupt)."""


class EmbeddingUnavailable(KnowledgeError):
    """The embedding provider cannot embed right now (server down, model missing, timeout)."""

    exit_code = 6


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The exception worth reporting from a task group: the first KnowledgeError (it says what
    to do), else the first exception of any kind."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if isinstance(exc, KnowledgeError):
            return exc
    return group.exceptions[0]
