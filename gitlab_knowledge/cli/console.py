"""Terminal output: rich on stdout for results, stderr for progress, warnings and errors.

Colour only on a TTY (rich's own detection, which also honours NO_COLOR); JSON output never
goes through rich. Everything else printed passes terminal.clean: GitLab's text cannot drive the
terminal (escape sequences, controls, bidi overrides).
"""

import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from gitlab_knowledge.errors import is_interrupt  # noqa: F401 - the CLI asks console.is_interrupt
from gitlab_knowledge.terminal import clean


class SafeConsole(Console):
    """A rich console whose text passes terminal.clean: every string printed or put in a table
    before layout (an escape sequence is still whole there), and every text segment again before
    its style is applied (a Text built elsewhere). Rich's own colours and cursor moves (control
    segments) stay, the text's own codes go."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(clean(text), **options)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(clean(segment.text), segment.style) for segment in buffer)


# Piped output is not squeezed into 80 columns: tables stay one row per item for grep and agents.
out = SafeConsole(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = SafeConsole(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
        return stamp.isoformat().replace("+00:00", "Z")
    return str(value)


def when(value: datetime | None) -> str:
    """`2024-03-15 09:12` for a naive-UTC timestamp, '-' for none."""
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "never"
    now = now or datetime.now(UTC).replace(tzinfo=None)
    seconds = int((now - value).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86400:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def environment_failure(exc: BaseException) -> str | None:
    """One line for failures of the machine rather than of the code (a full disk or a read-only
    directory under Dagster's SQLite storage or a scratch directory), None for anything else."""
    if type(exc).__module__.startswith("sqlalchemy"):
        cause = getattr(exc, "orig", None) or exc
        return (f"Dagster's run storage failed: {one_line(str(cause))} (check the free space and the "
                "permissions of its directory: $DAGSTER_HOME, ./data/dagster or <data_dir>/dagster)")
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"cannot use{where}: {exc.strerror}"
    return None


def one_line(message: str) -> str:
    """A message as one printable line: later lines dropped (a library's SQL and links), and
    characters the terminal cannot encode (lone surrogates from undecodable arguments) escaped."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {escape(one_line(message))}", markup=True, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(one_line(message))}", markup=True, highlight=False, soft_wrap=True)
