"""Search filters, validated once and pushed down into both retrievers."""

import re
from dataclasses import dataclass
from datetime import date, datetime

from gitlab_knowledge.errors import UsageError

TYPE_ALIASES = {"issue": "issue", "issues": "issue", "mr": "merge_request", "mrs": "merge_request",
                "merge_request": "merge_request", "discussion": "discussion", "discussions": "discussion"}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_date(text: str, flag: str) -> date:
    """ISO `YYYY-MM-DD` only; anything else is one clear line."""
    if not _DATE.match(text or ""):
        raise UsageError(f"{flag} expects a date as YYYY-MM-DD, got {text!r}")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} expects a real calendar date as YYYY-MM-DD, got {text!r}") from None


@dataclass(frozen=True)
class Filters:
    types: tuple[str, ...] = ()  # source types: issue | merge_request | discussion
    author: str | None = None
    labels: tuple[str, ...] = ()  # every one must match
    after: date | None = None  # created on or after
    before: date | None = None  # created before (exclusive)
    project: str | None = None
    state: str | None = None
    exclude_confidential: bool = False
    exclude_internal: bool = False

    @classmethod
    def build(cls, *, types: list[str] | None = None, author: str | None = None, labels: list[str] | None = None,
              after: str | None = None, before: str | None = None, project: str | None = None,
              state: str | None = None, exclude_confidential: bool = False,
              exclude_internal: bool = False) -> "Filters":
        kinds = []
        for t in types or []:
            if t.lower() not in TYPE_ALIASES:
                raise UsageError(f"--type expects issue, mr or discussion, got {t!r}")
            kinds.append(TYPE_ALIASES[t.lower()])
        after_d = parse_date(after, "--after") if after else None
        before_d = parse_date(before, "--before") if before else None
        if after_d and before_d and after_d >= before_d:
            raise UsageError(f"--after {after_d} is not before --before {before_d}: no date can match")
        return cls(types=tuple(dict.fromkeys(kinds)), author=(author or "").lstrip("@") or None,
                   labels=tuple(dict.fromkeys(label for label in labels or [] if label)),
                   after=after_d, before=before_d, project=project or None, state=state or None,
                   exclude_confidential=exclude_confidential, exclude_internal=exclude_internal)

    @property
    def after_dt(self) -> datetime | None:
        return datetime.combine(self.after, datetime.min.time()) if self.after else None

    @property
    def before_dt(self) -> datetime | None:
        """--before D means earlier than the start of day D."""
        return datetime.combine(self.before, datetime.min.time()) if self.before else None

    def is_empty(self) -> bool:
        return not (self.types or self.author or self.labels or self.after or self.before or self.project
                    or self.state or self.exclude_confidential or self.exclude_internal)

    def describe(self) -> dict[str, object]:
        return {"type": list(self.types), "author": self.author, "label": list(self.labels),
                "after": self.after.isoformat() if self.after else None,
                "before": self.before.isoformat() if self.before else None, "project": self.project,
                "state": self.state}

