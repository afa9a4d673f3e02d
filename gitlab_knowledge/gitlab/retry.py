"""When to ask GitLab again and how long to wait first (the rules: gitlab/client.py's docstring).

The waits are computed here and slept by the client: a 429's wait pauses the shared `RateLimiter`,
so every request holds back, not only the one that saw it.
"""

import email.utils
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NoReturn

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from gitlab_knowledge.errors import GitLabError
from gitlab_knowledge.redact import redact

if TYPE_CHECKING:
    from gitlab_knowledge.gitlab.client import ClientStats


class Transient(Exception):
    """A failure another attempt may cure; its text names it in the stats and the final error."""


def parse_server_time(headers: httpx.Headers) -> datetime | None:
    value = headers.get("date")
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def full_jitter(rng: random.Random, attempt: int, base: float, cap: float) -> float:
    # Full jitter (AWS architecture blog): uniform over [0, min(cap, base·2^attempt)].
    return rng.uniform(0, min(cap, base * (2 ** attempt)))


def asked_wait(headers: httpx.Headers) -> float | None:
    """The seconds a 429 asks for: `Retry-After` (seconds or an HTTP date), else until
    `RateLimit-Reset`, both by GitLab's clock; None when it names neither usably."""
    retry_after = headers.get("retry-after")
    if retry_after:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(retry_after)
                now = parse_server_time(headers) or datetime.now(UTC)
                return max(0.0, (when - now).total_seconds())
            except (TypeError, ValueError):
                pass
    reset = headers.get("ratelimit-reset")
    if reset:
        try:
            now_ts = (parse_server_time(headers) or datetime.now(UTC)).timestamp()
            return max(0.0, float(reset) - now_ts)
        except ValueError:
            pass
    return None


def quota_wait(headers: httpx.Headers, cap: float) -> float | None:
    """The seconds until the token's quota resets when this answer spent its last request
    (`RateLimit-Remaining: 0`), at most `cap`; None when it did not, or says so unreadably."""
    remaining = headers.get("ratelimit-remaining")
    reset = headers.get("ratelimit-reset")
    if remaining != "0" or not reset:
        return None
    try:
        now_ts = (parse_server_time(headers) or datetime.now(UTC)).timestamp()
        return min(float(reset) - now_ts, cap)
    except (ValueError, OverflowError):
        return None


def retrying(*, attempts: int, wait: Callable[[int], float], sleep: Callable[[float], Awaitable[None]],
             stats: "ClientStats", what: str) -> AsyncRetrying:
    """The retry loop of one request: `Transient` failures are tried `attempts` times in all,
    counted in `stats`, then reported as one `GitLabError` naming `what`."""

    def failure(state: RetryCallState) -> str:
        return str(state.outcome.exception()) if state.outcome else "unknown failure"

    def count_failure(state: RetryCallState) -> None:
        stats.failures[failure(state).split(" (")[0]] += 1

    def count_retry(state: RetryCallState) -> None:
        stats.retries += 1

    def give_up(state: RetryCallState) -> NoReturn:
        raise GitLabError(redact(
            f"GitLab request {what} failed after {state.attempt_number} attempts: {failure(state)}"))

    # One AsyncRetrying per call: tenacity keeps its iteration state on the instance, and
    # concurrent requests would otherwise share it.
    return AsyncRetrying(
        retry=retry_if_exception_type(Transient),
        stop=stop_after_attempt(attempts),
        wait=lambda state: wait(state.attempt_number),
        sleep=sleep,
        after=count_failure,
        before_sleep=count_retry,
        retry_error_callback=give_up,
    )
