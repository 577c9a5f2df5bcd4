"""The real clock (gpuctrl.runtime.SystemClock) and the fake one (gpuctrl.testing.FakeClock)."""

import asyncio
import time
from collections.abc import Callable

import pytest

from gpuctrl.runtime import Clock, SystemClock, WorkQueue
from gpuctrl.testing import FakeClock


async def test_system_clock_is_monotonic_time() -> None:
    clock = SystemClock()
    before = time.monotonic()
    now = clock.now()
    assert before <= now <= time.monotonic()


async def test_system_clock_waits() -> None:
    clock = SystemClock()
    start = clock.now()
    await clock.sleep(0.01)
    await clock.sleep_until(clock.now() + 0.01)
    assert clock.now() - start >= 0.02
    fired: list[float] = []
    handle = clock.call_at(clock.now() + 0.01, lambda: fired.append(clock.now()))
    cancelled = clock.call_at(clock.now() + 0.01, lambda: fired.append(-1.0))
    cancelled.cancel()
    await asyncio.sleep(0.03)
    handle.cancel()  # a no-op once it ran
    assert len(fired) == 1
    assert fired[0] > 0


@pytest.mark.parametrize(
    ("set_after", "seconds", "expected"),
    [
        pytest.param(None, 0.01, False, id="times out"),
        pytest.param(0.0, 1.0, True, id="already set"),
        pytest.param(0.005, 1.0, True, id="set while waiting"),
    ],
)
async def test_system_clock_wait_for_an_event(
    set_after: float | None, seconds: float, expected: bool
) -> None:
    clock = SystemClock()
    event = asyncio.Event()
    if set_after == 0.0:
        event.set()
    elif set_after is not None:
        asyncio.get_running_loop().call_later(set_after, event.set)
    assert await asyncio.wait_for(clock.wait(event, seconds), 2) is expected


async def test_fake_time_stands_still_until_advanced(clock: FakeClock) -> None:
    assert clock.now() == 0.0
    await asyncio.sleep(0.01)
    assert clock.now() == 0.0
    clock.advance(1.5)
    assert clock.now() == 1.5
    assert FakeClock(start=100.0).now() == 100.0


async def test_fake_timers_run_in_deadline_order_at_their_deadline(clock: FakeClock) -> None:
    fired: list[tuple[str, float]] = []

    def record(name: str) -> Callable[[], None]:
        return lambda: fired.append((name, clock.now()))

    for name, when in [("c", 3.0), ("a", 1.0), ("b", 2.0), ("late", 10.0)]:
        clock.call_at(when, record(name))
    clock.call_at(2.5, lambda: fired.append(("cancelled", 0.0))).cancel()
    assert clock.next_deadline == 1.0
    clock.advance(5.0)
    assert fired == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.now() == 5.0
    assert clock.next_deadline == 10.0


async def test_a_fake_timer_set_in_the_past_runs_on_the_next_iteration(clock: FakeClock) -> None:
    clock.advance(5.0)
    fired: list[float] = []
    clock.call_at(1.0, lambda: fired.append(clock.now()))
    assert fired == []
    await asyncio.sleep(0)
    assert fired == [5.0]


async def test_fake_time_cannot_go_backwards(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1.0)


async def test_step_runs_the_tasks_it_wakes(clock: FakeClock) -> None:
    woke: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(10.0)
        await asyncio.sleep(0)  # a few more hops after waking
        await asyncio.sleep(0)
        woke.append(clock.now())

    task = asyncio.create_task(sleeper())
    await clock.step(9.0)
    assert woke == []
    await clock.step(1.0)
    assert woke == [10.0]
    await task


@pytest.mark.parametrize(
    ("set_at", "expected", "returns_at"),
    [
        pytest.param(None, False, 5.0, id="times out"),
        pytest.param(2.0, True, 2.0, id="set before the deadline"),
    ],
)
async def test_fake_wait_for_an_event(
    clock: FakeClock, set_at: float | None, expected: bool, returns_at: float
) -> None:
    event = asyncio.Event()
    if set_at is not None:
        clock.call_at(set_at, event.set)
    waiter = asyncio.create_task(clock.wait(event, 5.0))
    await clock.step()
    while not waiter.done():
        await clock.step(1.0)
    assert waiter.result() is expected
    assert clock.now() == returns_at


@pytest.mark.parametrize(
    ("finish_at", "pending_after", "returns_at"),
    [
        pytest.param((1.0, 2.0), 0, 2.0, id="all done before the deadline"),
        pytest.param((1.0, 9.0), 1, 5.0, id="one still running at the deadline"),
        pytest.param((), 0, 0.0, id="nothing to wait for"),
    ],
)
async def test_fake_wait_for_tasks(
    clock: FakeClock, finish_at: tuple[float, ...], pending_after: int, returns_at: float
) -> None:
    tasks = [asyncio.create_task(clock.sleep(seconds)) for seconds in finish_at]
    waiter = asyncio.create_task(clock.wait_tasks(tasks, 5.0))
    await clock.step()
    while not waiter.done():
        await clock.step(1.0)
    assert len(waiter.result()) == pending_after
    assert clock.now() == returns_at
    assert all(not task.cancelled() for task in tasks)  # wait_tasks cancels nothing
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_cancelled_sleep_leaves_no_timer(clock: FakeClock) -> None:
    sleeper = asyncio.create_task(clock.sleep(10.0))
    await clock.step()
    assert clock.next_deadline == 10.0
    sleeper.cancel()
    await clock.step()
    assert sleeper.cancelled()
    assert clock.next_deadline is None


async def test_autojump_skips_to_the_next_timer_when_idle() -> None:
    with FakeClock(autojump_threshold=0) as clock:
        started = time.monotonic()
        await clock.sleep(3600.0)
        assert clock.now() == 3600.0
        await asyncio.gather(clock.sleep(10.0), clock.sleep(20.0))
        assert clock.now() == 3620.0
        assert time.monotonic() - started < 5  # virtual hours, real moments


async def test_autojump_drives_a_work_queue_through_its_backoff() -> None:
    with FakeClock(autojump_threshold=0) as clock:
        queue: WorkQueue[str] = WorkQueue(clock=clock)
        for _ in range(20):  # 5 ms doubling: 18 retries reach 1310 s, then 2 at the 1000 s cap
            queue.add_rate_limited("a")
            assert await asyncio.wait_for(queue.get(), 5) == "a"
            queue.done("a")
        assert clock.now() == pytest.approx(0.005 * (2**18 - 1) + 2 * 1000.0)


async def test_autojump_waits_while_tasks_are_busy() -> None:
    with FakeClock(autojump_threshold=0) as clock:
        sleeper = asyncio.create_task(clock.sleep(1.0))
        for _ in range(100):  # this task keeps the loop busy: no jump
            await asyncio.sleep(0)
            assert clock.now() == 0.0
        await sleeper
        assert clock.now() == 1.0


async def test_step_and_autojump_take_turns() -> None:
    with FakeClock(autojump_threshold=0) as clock:
        sleeper = asyncio.create_task(clock.sleep(10.0))
        await asyncio.wait_for(clock.step(1.0), 5)  # the watcher stays out of step's way
        await asyncio.wait_for(sleeper, 5)  # and jumps afterwards
        assert clock.now() == 10.0


async def test_closed_autojump_no_longer_moves_time() -> None:
    clock = FakeClock(autojump_threshold=0)
    clock.close()
    sleeper = asyncio.create_task(clock.sleep(1.0))
    await asyncio.sleep(0.01)
    assert not sleeper.done()
    clock.advance(1.0)
    await sleeper


def test_autojump_threshold_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="autojump_threshold"):
        FakeClock(autojump_threshold=-1.0)


def test_both_clocks_are_clocks() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)
