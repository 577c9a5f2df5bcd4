"""The rate-limiting layer: gpuctrl.runtime.WorkQueue."""

import asyncio
from collections.abc import Callable

import pytest

from gpuctrl.runtime import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    QueueShutDown,
    RateLimiter,
    WorkQueue,
)
from gpuctrl.testing import FakeClock


async def ready_after(queue: WorkQueue[str], clock: FakeClock, key: str) -> float:
    """Seconds of virtual time until ``key`` can be got (handed back with done)."""
    started = clock.now()
    while not len(queue):
        deadline = clock.next_deadline
        assert deadline is not None, f"{key!r} is neither queued nor waiting"
        await clock.step(deadline - clock.now())
    assert await queue.get() == key
    queue.done(key)
    return clock.now() - started


async def test_retries_back_off_5ms_doubling(clock: FakeClock) -> None:
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    delays = []
    for _ in range(5):
        queue.add_rate_limited("a")
        delays.append(await ready_after(queue, clock, "a"))
    assert delays == pytest.approx([0.005, 0.010, 0.020, 0.040, 0.080])
    assert queue.num_requeues("a") == 5


async def test_forget_resets_the_backoff(clock: FakeClock) -> None:
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for _ in range(3):
        queue.add_rate_limited("a")
        await ready_after(queue, clock, "a")
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    assert await ready_after(queue, clock, "a") == pytest.approx(0.005)


async def test_the_default_bucket_paces_retries_of_all_keys(clock: FakeClock) -> None:
    queue: WorkQueue[int] = WorkQueue(clock=clock)
    for key in range(102):
        queue.add_rate_limited(key)
    await clock.step(0.005)
    assert len(queue) == 100  # the burst
    await clock.step(0.095)
    assert len(queue) == 101  # then one per 100 ms
    await clock.step(0.1)
    assert len(queue) == 102


@pytest.mark.parametrize(
    ("make_limiter", "expected"),
    [
        pytest.param(lambda _: ItemExponentialFailureRateLimiter(1.0, 2.0), [1, 2, 2], id="exp"),
        pytest.param(lambda clock: BucketRateLimiter(1.0, 1, clock=clock), [0, 1, 1], id="bucket"),
    ],
)
async def test_an_injected_rate_limiter_decides_the_delays(
    clock: FakeClock, make_limiter: Callable[[FakeClock], RateLimiter], expected: list[float]
) -> None:
    queue: WorkQueue[str] = WorkQueue(clock=clock, rate_limiter=make_limiter(clock))
    delays = []
    for _ in expected:
        queue.add_rate_limited("a")
        delays.append(await ready_after(queue, clock, "a"))
    assert delays == pytest.approx(expected)


async def test_a_rate_limited_key_is_dropped_at_shutdown(clock: FakeClock) -> None:
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_rate_limited("a")
    queue.shutdown()
    await clock.step(1.0)
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(queue.get(), 1)
