"""Linearity without a stopwatch: the same work at n and at 8n, compared in this process's CPU
time. A quadratic path costs 64 times more at 8n, a linear one 8 times; the ratio does not depend
on how fast or how loaded the machine is (CPU time does not count the time other processes run),
so a test can say "linear" without setting a speed target, which belongs in a benchmark."""

import gc
import time
from collections.abc import Callable

FACTOR = 8
MAX_RATIO = 24.0  # between linear (8) and quadratic (64), with room for noise and n log n


def cpu_seconds(work: Callable[[], object], repeats: int = 3) -> float:
    """The best of `repeats` runs, with the collector off: a collection or a preemption lands in
    one run, not in all of them."""
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            started = time.process_time()
            work()
            best = min(best, time.process_time() - started)
    finally:
        if enabled:
            gc.enable()
    return best


def assert_linear(work: Callable[[int], object], n: int) -> None:
    """`work(FACTOR * n)` costs at most MAX_RATIO times `work(n)`."""
    small = cpu_seconds(lambda: work(n))
    large = cpu_seconds(lambda: work(FACTOR * n))
    assert large <= MAX_RATIO * max(small, 1e-4), (
        f"{FACTOR}x the input cost {large / max(small, 1e-9):.1f}x the CPU time ({small:.4f}s -> {large:.4f}s)")
