"""Per-token token-bucket rate limiting with GitLab's RateLimit-* headers.

Refill runs on the real monotonic clock (a client really has to wait), while the absolute times in
headers (RateLimit-Reset, RateLimit-ResetTime) come from the sandbox clock so they agree with `Date`.
"""

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .clock import http_date, unix_seconds

THROTTLE_NAME = "throttle_authenticated_api"


@dataclass(frozen=True)
class RateState:
    allowed: bool
    limit: int
    remaining: int
    seconds_to_full: float
    retry_after: int


class RateLimiter:
    """A bucket per token: capacity `rps` (at least 1), refilled at `rps` tokens per second."""

    def __init__(self, rps: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        if rps <= 0:
            raise ValueError("rate limit must be > 0 requests per second")
        self.rps = float(rps)
        self.capacity = max(1.0, self.rps)
        self._monotonic = monotonic
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, token: str) -> RateState:
        """Spend one token if there is one."""
        return self._take(token, spend=True)

    def peek(self, token: str) -> RateState:
        """The bucket's state without spending (for responses that are not metered)."""
        return self._take(token, spend=False)

    def _take(self, token: str, *, spend: bool) -> RateState:
        now = self._monotonic()
        with self._lock:
            tokens, last = self._buckets.get(token, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rps)
            allowed = tokens >= 1.0
            if allowed and spend:
                tokens -= 1.0
            self._buckets[token] = (tokens, now)
        retry_after = 0 if allowed else max(1, math.ceil((1.0 - tokens) / self.rps))
        return RateState(
            allowed=allowed,
            limit=math.ceil(self.capacity),
            remaining=max(0, math.floor(tokens)),
            seconds_to_full=(self.capacity - tokens) / self.rps,
            retry_after=retry_after,
        )


def rate_headers(state: RateState, now: datetime, *, reset: bool = True) -> dict[str, str]:
    headers = {
        "RateLimit-Limit": str(state.limit),
        "RateLimit-Name": THROTTLE_NAME,
        "RateLimit-Observed": str(state.limit - state.remaining),
        "RateLimit-Remaining": str(state.remaining),
    }
    if reset:
        headers["RateLimit-Reset"] = str(unix_seconds(now) + max(0, math.ceil(state.seconds_to_full)))
    return headers


def synthetic_state(retry_after: int | None, limit: int = 2000) -> RateState:
    """A spent quota for injected 429s when no real limiter is configured (2,000/min is
    gitlab.com's catch-all API limit)."""
    wait = retry_after if retry_after is not None else 1
    return RateState(allowed=False, limit=limit, remaining=0, seconds_to_full=float(wait), retry_after=max(1, wait))


def throttled_headers(
    state: RateState, now: datetime, *, retry_after: int | None, reset: bool = True
) -> dict[str, str]:
    """Headers of a 429: the RateLimit-* set plus RateLimit-ResetTime and Retry-After."""
    headers = rate_headers(state, now, reset=reset)
    wait = retry_after if retry_after is not None else max(1, state.retry_after)
    if reset:
        reset_at = now + timedelta(seconds=wait)
        headers["RateLimit-Reset"] = str(unix_seconds(reset_at))
        headers["RateLimit-ResetTime"] = http_date(reset_at)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return headers
