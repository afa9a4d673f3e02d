"""GitLab timestamps in, naive-UTC datetimes out (what the store holds)."""

from datetime import UTC, datetime
from typing import overload


def parse_time(value: str | None) -> datetime | None:
    """GitLab's ISO 8601 (`2024-03-15T09:12:44.120Z`, or with an offset) as naive UTC."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


@overload
def naive_utc(value: datetime) -> datetime: ...


@overload
def naive_utc(value: None) -> None: ...


def naive_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
