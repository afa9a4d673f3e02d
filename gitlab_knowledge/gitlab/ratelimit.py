"""A client-side rate limiter shared by every request of one client.

Requests are spaced 1/rate apart (no bursts): a burst would only be answered by GitLab with 429s,
and even spacing is what keeps a sync's wall time at calls ÷ rate. A 429 or an exhausted
`RateLimit-Remaining` pauses all requests until the reset, not just the one that saw it.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.interval = 1.0 / rate if rate and rate > 0 else 0.0
        self._clock = clock
        self._sleep = sleep
        self._next_slot = 0.0
        self._paused_until = 0.0
        self.waited = 0.0  # seconds spent waiting here, for run metadata

    async def acquire(self) -> float:
        """Wait for this request's slot; returns how long it waited."""
        now = self._clock()
        slot = max(now, self._next_slot, self._paused_until)
        self._next_slot = slot + self.interval
        delay = slot - now
        if delay > 0:
            self.waited += delay
            await self._sleep(delay)
        return max(delay, 0.0)

    def pause(self, seconds: float) -> float:
        """Hold every request back for `seconds` from now (a 429 or an empty quota); returns by how
        much this moved the end of the pause (0 when an earlier pause already covered it)."""
        if seconds <= 0:
            return 0.0
        until = self._clock() + seconds
        moved = max(0.0, until - max(self._paused_until, self._clock()))
        self._paused_until = max(self._paused_until, until)
        return moved
