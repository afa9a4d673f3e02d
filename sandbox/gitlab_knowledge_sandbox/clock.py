"""A controllable clock and the timestamp formats the sandbox reads and writes.

Mutations and the `Date` header read this clock instead of the system clock so tests can cross
GitLab's 60-second ThrottledTouch window (and any other time rule) without sleeping.
"""

import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SandboxClock:
    """Real UTC time plus an adjustable offset, or frozen at a set instant."""

    def __init__(self, frozen_at: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._offset = timedelta(0)
        self._frozen: datetime | None = _as_utc(frozen_at) if frozen_at is not None else None

    def now(self) -> datetime:
        with self._lock:
            if self._frozen is not None:
                return self._frozen
            return datetime.now(UTC) + self._offset

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward (or back, if negative) and return the new time."""
        delta = timedelta(seconds=seconds)
        with self._lock:
            if self._frozen is not None:
                self._frozen += delta
            else:
                self._offset += delta
        return self.now()

    def set(self, instant: datetime) -> datetime:
        """Freeze the clock at `instant` (naive datetimes are taken as UTC)."""
        with self._lock:
            self._frozen = _as_utc(instant)
        return self.now()

    def freeze(self) -> datetime:
        """Stop the clock where it is now."""
        return self.set(self.now())

    def unfreeze(self) -> datetime:
        """Let a frozen clock tick again, continuing from the instant it was frozen at."""
        with self._lock:
            if self._frozen is not None:
                self._offset = self._frozen - datetime.now(UTC)
                self._frozen = None
        return self.now()

    @property
    def frozen(self) -> bool:
        with self._lock:
            return self._frozen is not None


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def iso_ms(value: datetime) -> str:
    """GitLab's timestamp format: `2024-03-15T09:12:44.120Z`."""
    value = _as_utc(value)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> datetime:
    """Parse an ISO 8601 timestamp or date; naive values are UTC. Raises ValueError."""
    text = text.strip()
    if not text:
        raise ValueError("empty timestamp")
    # fromisoformat in 3.11 handles `Z`, offsets, dates and fractional seconds of any length.
    parsed = datetime.fromisoformat(text.replace(" ", "T", 1) if len(text) > 10 else text)
    return _as_utc(parsed)


def ts_key(text: str) -> int:
    """Microseconds since the epoch, so timestamps in any ISO spelling compare correctly."""
    delta = parse_iso(text) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def key_to_datetime(key: int) -> datetime:
    return _EPOCH + timedelta(microseconds=key)


def http_date(value: datetime) -> str:
    """RFC 7231 / RFC 2616 date (`Mon, 18 Jan 2016 09:43:18 GMT`)."""
    return format_datetime(_as_utc(value), usegmt=True)


def unix_seconds(value: datetime) -> int:
    return int((_as_utc(value) - _EPOCH).total_seconds())
