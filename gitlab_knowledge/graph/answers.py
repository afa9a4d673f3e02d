"""The graph's answers as typed records: `related`, `history`, `me` and `person` return these.

Each record's `as_dict()` is its command's --json document (cli/schemas/<name>.json), its keys in
the record's field order; the CLI prints it and the MCP tools return it, so both faces hand out
the same bytes. The entries inside (links, merge requests, notes) are already JSON-ready dicts.
"""

from dataclasses import dataclass, fields
from typing import Any

Entry = dict[str, Any]
# Entries per list of `me` unless asked for more (the CLI's --limit, the MCP tool's `limit`): a
# person or an agent reads the newest few, and 7 lists of 100 were ~184 KB an SDK client validated
# in ~40 ms, longer than the tool took.
ME_LIMIT = 20


class Answer:
    """A record whose fields, in order, are the keys of its JSON document."""

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, f.name)
            out[f.name] = value.as_dict() if isinstance(value, Answer) else value
        return out


@dataclass(frozen=True)
class Related(Answer):
    """An issue or MR and its links, grouped (graph.queries.GROUPS), each other item once per group."""

    item: Entry
    links: dict[str, list[Entry]]


@dataclass(frozen=True)
class History(Answer):
    """The merge requests that touched a path, newest first, and the renames followed back."""

    path: str
    project: str | None
    total: int
    renames: list[Entry]
    merge_requests: list[Entry]


@dataclass(frozen=True)
class Changes(Answer):
    """What happened on a user's items since a day: new notes, closes and merges."""

    notes: list[Entry]
    state_changes: list[Entry]


@dataclass(frozen=True)
class Me(Answer):
    """What needs a user's attention."""

    user: str
    user_from: str  # "argument" or "token"
    since: str | None
    project: str | None
    counts: dict[str, int | None]  # every list's length before `limit` cut it
    assigned_issues: list[Entry]
    assigned_mrs: list[Entry]
    review_requested: list[Entry]
    authored_open_mrs: list[Entry]
    mentions: list[Entry]
    todos: list[Entry] | None  # GitLab's pending To-Dos, asked live; None when not asked
    changes: Changes


@dataclass(frozen=True)
class Person(Answer):
    """What a person works on: counts, the newest `limit` of each list, top labels and paths."""

    user: str
    name: str | None
    project: str | None
    since: str | None
    counts: dict[str, int]
    authored_issues: list[Entry]
    authored_mrs: list[Entry]
    reviewed_mrs: list[Entry]
    assigned: list[Entry]
    commented_on: list[Entry]
    mentioned_in: list[Entry]
    top_labels: list[Entry]
    top_paths: list[Entry]
    recent_activity: list[Entry]
