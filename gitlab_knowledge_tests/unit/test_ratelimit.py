"""RateLimiter with a fake clock: even spacing, no bursts, pauses."""

import asyncio

import pytest

from gitlab_knowledge.gitlab.ratelimit import RateLimiter


class FakeTime:
    """A monotonic clock that only moves when something sleeps on it (or a test advances it)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def limiter(rate: float, time: FakeTime) -> RateLimiter:
    return RateLimiter(rate, clock=time.clock, sleep=time.sleep)


def acquire_times(lim: RateLimiter, time: FakeTime, count: int) -> list[float]:
    async def run() -> list[float]:
        times = []
        for _ in range(count):
            await lim.acquire()
            times.append(time.now)
        return times
    return asyncio.run(run())


def test_consecutive_acquires_are_spaced_one_interval_apart() -> None:
    time = FakeTime()
    lim = limiter(10, time)

    times = acquire_times(lim, time, 5)

    assert [t - 1000.0 for t in times] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert time.sleeps == pytest.approx([0.1] * 4)
    assert lim.waited == pytest.approx(0.4)


def test_acquire_returns_how_long_it_waited() -> None:
    time = FakeTime()
    lim = limiter(4, time)

    async def run() -> list[float]:
        return [await lim.acquire() for _ in range(3)]

    assert asyncio.run(run()) == pytest.approx([0.0, 0.25, 0.25])


def test_concurrent_acquires_at_one_instant_get_successive_slots() -> None:
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    # A frozen clock: all four ask at the same instant, so each delay is its slot's offset.
    lim = RateLimiter(10, clock=lambda: 1000.0, sleep=record)

    async def run() -> list[float]:
        return list(await asyncio.gather(*(lim.acquire() for _ in range(4))))

    assert sorted(asyncio.run(run())) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert sorted(sleeps) == pytest.approx([0.1, 0.2, 0.3])
    assert lim.waited == pytest.approx(0.6)


def test_idle_time_does_not_accumulate_into_a_burst() -> None:
    time = FakeTime()
    lim = limiter(10, time)
    acquire_times(lim, time, 1)
    time.now += 5.0

    times = acquire_times(lim, time, 3)

    assert [t - times[0] for t in times] == pytest.approx([0.0, 0.1, 0.2])
    assert time.sleeps == pytest.approx([0.1, 0.1])


def test_rate_zero_disables_the_limiter() -> None:
    time = FakeTime()
    lim = limiter(0, time)

    async def run() -> list[float]:
        return [await lim.acquire() for _ in range(50)]

    assert asyncio.run(run()) == [0.0] * 50
    assert time.sleeps == []
    assert lim.waited == 0.0


@pytest.mark.parametrize("rate", [0, 10])
def test_pause_holds_the_next_acquire_until_now_plus_seconds(rate: float) -> None:
    time = FakeTime()
    lim = limiter(rate, time)
    lim.pause(2.5)

    times = acquire_times(lim, time, 1)

    assert times == [pytest.approx(1002.5)]
    assert lim.waited == pytest.approx(2.5)


def test_a_shorter_pause_does_not_cut_a_longer_one_short() -> None:
    time = FakeTime()
    lim = limiter(0, time)
    lim.pause(5.0)
    lim.pause(1.0)
    lim.pause(0.0)
    lim.pause(-3.0)

    assert acquire_times(lim, time, 1) == [pytest.approx(1005.0)]


def test_a_pause_that_has_passed_no_longer_delays() -> None:
    time = FakeTime()
    lim = limiter(0, time)
    lim.pause(2.0)
    time.now += 3.0

    acquire_times(lim, time, 1)

    assert time.sleeps == []


def test_after_a_pause_requests_resume_at_the_configured_spacing() -> None:
    time = FakeTime()
    lim = limiter(10, time)
    lim.pause(1.0)

    times = acquire_times(lim, time, 3)

    assert [t - 1000.0 for t in times] == pytest.approx([1.0, 1.1, 1.2])
