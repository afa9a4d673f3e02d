"""Terminal output: rich on stdout for results, stderr for progress, warnings and errors.

Colour only on a TTY (rich's own detection, which also honours NO_COLOR); JSON output never
goes through rich.
"""

import json
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape

# Piped output is not squeezed into 80 columns: tables stay one row per item for grep and agents.
out = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


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


def fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
