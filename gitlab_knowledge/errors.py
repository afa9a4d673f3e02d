"""Errors a user sees as one line.

Every failure a user can cause or fix (bad config, wrong token, GitLab down, store busy) is a
`KnowledgeError`: the CLI prints its message on one line and exits with `exit_code`, never a
traceback. Messages must not contain secrets; `redact` is applied to them anyway.

An error a user can fix by passing something carries what it is about as fields (the candidate
projects of an ambiguous reference, the field and valid values of a bad value) and each face words
the fix its own way: a person types flags (`--project`), an agent passes arguments (`project`).
`message` is the command line's wording; `worded(AGENT)` the MCP server's. `error_document` is the
one JSON error envelope.
"""

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Face:
    """How one entry point names what a user passes: flags on a command line, arguments for agents."""

    name: str
    flags: bool

    def option(self, name: str) -> str:
        """An option as this face's user writes it: `--user USERNAME` / `user (a GitLab username)`."""
        metavar, about = _ARGUMENTS.get(name, ("", ""))
        if self.flags:
            return f"--{name}" + (f" {metavar}" if metavar else "")
        return name + (f" ({about})" if about else "")

    def flag(self, name: str) -> str:
        """An option's name alone: `--mode` / `mode`."""
        return f"--{name}" if self.flags else name

    def add(self, name: str) -> str:
        """The fix "supply this option": `add --project` on a command line, `pass project` for agents."""
        return f"add {self.option(name)}" if self.flags else f"pass {self.option(name)}"

    def pass_(self, name: str) -> str:
        """`pass --project` on a command line, `pass project` for agents."""
        return f"pass {self.option(name)}"


# An option's placeholder on a command line and its gloss for agents, where a bare name says too little.
_ARGUMENTS = {"user": ("USERNAME", "a GitLab username")}
CLI = Face("cli", flags=True)  # `python -m gitlab_knowledge` and `python -m gitlab_knowledge.search`
AGENT = Face("mcp", flags=False)  # the MCP server's tool errors


class KnowledgeError(Exception):
    """A failure with a message meant for the user."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        from gitlab_knowledge.redact import redact

        return redact(self.message)

    def worded(self, face: Face) -> str:
        """The message as `face` says it (redacted); only errors with a fix to pass differ by face."""
        from gitlab_knowledge.redact import redact

        return redact(self._text(face))

    def _text(self, face: Face) -> str:
        return self.message

    def fields(self) -> dict[str, Any]:
        """What the error is about, for machines (empty unless a subclass carries data)."""
        return {}


class ConfigError(KnowledgeError):
    """Missing or invalid configuration (names the field)."""

    exit_code = 2


class UsageError(KnowledgeError):
    """Bad command-line input."""

    exit_code = 2


class _Worded(UsageError):
    """A usage error whose message is built from its fields for each face."""

    def __init__(self) -> None:
        super().__init__(self._text(CLI))


class UnknownProject(UsageError):
    """`project` names no synced project; `known`: the ones that are."""

    def __init__(self, project: str, known: list[str]) -> None:
        self.project, self.known = project, list(known)
        super().__init__(f"project {project!r} is not in the store (synced projects: {', '.join(known) or 'none yet'})")

    def fields(self) -> dict[str, Any]:
        return {"project": self.project, "known_projects": self.known}


class ItemNotFound(UsageError):
    """No stored item is what `label` names (`issue #5`, `!847`)."""

    def __init__(self, label: str, kind: str, iid: int, project: str | None) -> None:
        self.label, self.kind, self.iid, self.project = label, kind, iid, project
        super().__init__(f"no {label} in the store" + (f" for {project}" if project else ""))

    def fields(self) -> dict[str, Any]:
        return {"kind": self.kind, "iid": self.iid, "project": self.project}


class AmbiguousReference(_Worded):
    """A short reference names items in several projects (`candidates`). The fix: name the project,
    as an option or, with `qualified`, in the reference itself (`group/project#5`); `written_as`
    puts the reference form first (`write it as group/project#IID or pass --project`)."""

    def __init__(self, label: str, candidates: list[str], *, qualified: str | None = None,
                 written_as: str | None = None) -> None:
        self.label, self.candidates = label, sorted(candidates)
        self.qualified, self.written_as = qualified, written_as
        super().__init__()

    def _text(self, face: Face) -> str:
        if self.written_as:
            fix = f"write it as {self.written_as} or {face.pass_('project')}"
        else:
            fix = face.add("project") + (f" or write {self.qualified}" if self.qualified else "")
        return f"{self.label} exists in several projects ({', '.join(self.candidates)}): {fix}"

    def fields(self) -> dict[str, Any]:
        return {"reference": self.label, "candidate_projects": self.candidates}


class BadReference(UsageError):
    """`ref` is none of the reference forms `command` reads (`forms` lists them)."""

    def __init__(self, command: str, ref: str, forms: str) -> None:
        self.command, self.ref, self.forms = command, ref, forms
        super().__init__(f"{command} expects {forms}, got {ref!r}")

    def fields(self) -> dict[str, Any]:
        return {"reference": self.ref}


class BadValue(_Worded):
    """An option's value is not one it takes: `field`, the value given and the valid ones
    (`expects` says them when a list of words does not: `embedded or ollama[:MODEL]`)."""

    def __init__(self, field: str, value: Any, valid: tuple[str, ...], expects: str | None = None) -> None:
        self.field, self.value, self.valid = field, value, tuple(valid)
        self.expects = expects or f"one of {', '.join(valid)}"
        super().__init__()

    def _text(self, face: Face) -> str:
        return f"{face.flag(self.field)} expects {self.expects}, got {self.value!r}"

    def fields(self) -> dict[str, Any]:
        return {"field": self.field, "value": self.value, "valid": list(self.valid)}


class MissingUser(_Worded):
    """Nobody to answer for: no user was named and no sync has recorded the token's."""

    def _text(self, face: Face) -> str:
        return ("no GitLab user is recorded in the store yet: run a sync (`python -m gitlab_knowledge sync`) or "
                + face.pass_("user"))

    def fields(self) -> dict[str, Any]:
        return {"field": "user"}


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


class Interrupted(KnowledgeError):
    """Ctrl-C or SIGTERM stopped a command at a point where it can say what that left behind."""

    exit_code = 130


class StoreError(KnowledgeError):
    """The local store cannot be written or read (disk full, read-only, corrupt)."""


# The machine's failures a layer's write can meet, as errno and as the words libraries wrap them
# in (DuckDB's IOException, Lance's and Tantivy's errors, SQLite's): the disk, not the code.
_DISK_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}
_DISK_WORDS = re.compile(r"no space left on device|disk quota exceeded|read-only file system|permission denied|"
                         r"database or disk is full|attempt to write a readonly database|\berrno\W+(\d+)", re.I)
_QUOTED_PATH = re.compile(r"""["'](/[^"'\n]+)["']""")
_SCRATCH_DIR = re.compile(r"^gk-[a-z]+-")


def disk_failure(exc: BaseException) -> tuple[str, str | None] | None:
    """(what the disk refused, the path it refused, when the error names one) if `exc`, or what it
    wraps, is a full disk, a read-only mount or a denied write; None for any other failure."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return None
        found = _disk_cause(seen)
        if found is not None:
            return found
        seen = seen.__cause__ or seen.__context__
    return None


def _disk_cause(exc: BaseException) -> tuple[str, str | None] | None:
    path: str | None = None
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        cause = _DISK_ERRNOS[exc.errno]
        path = os.fsdecode(exc.filename) if exc.filename is not None else None
    else:
        text = str(getattr(exc, "orig", None) or exc)
        match = _DISK_WORDS.search(text)
        if match is None:
            return None
        if match.group(1) is not None:  # a JSON-ish `"errno":"28"` (DuckDB's IOException)
            if int(match.group(1)) not in _DISK_ERRNOS:
                return None
            cause = _DISK_ERRNOS[int(match.group(1))]
        else:
            cause = {"database or disk is full": "no space left on device",
                     "attempt to write a readonly database": "read-only file system"}.get(
                match.group(0).lower(), match.group(0).lower())
        quoted = _QUOTED_PATH.search(text)
        path = quoted.group(1) if quoted else None
    if path is not None:
        # A scratch directory's name means nothing to the user: the directory it was made in does.
        parts = Path(path).parts
        for i, part in enumerate(parts):
            if _SCRATCH_DIR.match(part):
                path = str(Path(*parts[:i]))
                break
    return cause, path


class EmbeddingUnavailable(KnowledgeError):
    """The embedding provider cannot embed right now (server down, model missing, timeout)."""

    exit_code = 6


def error_document(message: str, exit_code: int, error: BaseException | None = None) -> dict[str, Any]:
    """The JSON error envelope: what `--json` prints on stdout when a command fails, and what the
    search command's warm server answers it with. `details`: the error's fields, when it has any."""
    document: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "error": message, "exit_code": exit_code}
    details = error.fields() if isinstance(error, KnowledgeError) else {}
    if details:
        document["details"] = details
    return document


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The exception worth reporting from a task group: the first KnowledgeError (it says what
    to do), else the first exception of any kind."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if isinstance(exc, KnowledgeError):
            return exc
    return group.exceptions[0]


def is_interrupt(exc: BaseException | None) -> bool:
    """Whether `exc` is, or was caused by, an interrupt: Dagster turns SIGINT and SIGTERM inside a
    run into its own DagsterExecutionInterruptedError, which may arrive wrapped.

    A signal that comes while the main thread is in a DuckDB query is one too, in another form:
    DuckDB runs the handler, drops the exception it raised and raises its own
    `RuntimeError("Query interrupted")`, an Exception with no cause. Taken for a failure, it was
    handled as one (a batch's optional read answering "unknown" and carrying on), and the
    interrupt was lost: the run went on to the end."""
    seen = 0
    while exc is not None and seen < 20:
        if (isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "DagsterExecutionInterruptedError"
                or _query_interrupted(exc)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _query_interrupted(exc: BaseException) -> bool:
    """DuckDB's word for a query a signal interrupted (its `InterruptException`, or the plain
    RuntimeError its Python client raises)."""
    return (type(exc).__name__ == "InterruptException"
            or (type(exc) is RuntimeError and str(exc) == "Query interrupted"))
