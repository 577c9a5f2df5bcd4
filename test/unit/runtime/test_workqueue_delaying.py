"""The delaying layer of the work queue (gpuctrl.runtime._delaying.DelayingQueue)."""

import asyncio
import random

import pytest

from gpuctrl.runtime import QueueShutDown
from gpuctrl.runtime._delaying import DelayingQueue
from gpuctrl.testing import FakeClock

# (operation, argument): "after" is (key, seconds); "step" advances the clock and lets tasks run;
# "ready" drains what can be got right now and checks it, handing each key back with done().
Step = tuple[str, object]

SCRIPTS: dict[str, list[Step]] = {
    "a delayed key is added once its time comes": [
        ("after", ("a", 1.0)), ("ready", []), ("step", 0.999), ("ready", []),
        ("step", 0.001), ("ready", ["a"]),
    ],
    "a delay of zero is a plain add": [("after", ("a", 0.0)), ("ready", ["a"])],
    "a negative delay is a plain add": [("after", ("a", -5.0)), ("ready", ["a"])],
    "keys become ready in time order, not call order": [
        ("after", ("a", 3.0)), ("after", ("b", 1.0)), ("after", ("c", 2.0)), ("step", 5.0),
        ("ready", ["b", "c", "a"]),
    ],
    "equal times keep call order": [
        ("after", ("b", 1.0)), ("after", ("a", 1.0)), ("step", 1.0), ("ready", ["b", "a"]),
    ],
    "an earlier time moves a waiting key earlier": [
        ("after", ("a", 10.0)), ("after", ("a", 1.0)), ("step", 1.0), ("ready", ["a"]),
        ("step", 9.0), ("ready", []),
    ],
    "a later time leaves a waiting key where it is": [
        ("after", ("a", 1.0)), ("after", ("a", 10.0)), ("step", 1.0), ("ready", ["a"]),
        ("step", 9.0), ("ready", []),
    ],
    "a waiting key is de-duplicated with a queued one when it fires": [
        ("add", "a"), ("after", ("a", 1.0)), ("step", 1.0), ("ready", ["a"]),
    ],
    "a waiting key fires again after the queued one was processed": [
        ("add", "a"), ("after", ("a", 1.0)), ("ready", ["a"]), ("step", 1.0), ("ready", ["a"]),
    ],
    "a key can wait again after it fired": [
        ("after", ("a", 1.0)), ("step", 1.0), ("ready", ["a"]), ("after", ("a", 2.0)),
        ("step", 1.0), ("ready", []), ("step", 1.0), ("ready", ["a"]),
    ],
    "shutdown drops waiting keys": [
        ("after", ("a", 1.0)), ("shutdown", None), ("step", 2.0), ("ready", []),
    ],
    "add_after is ignored after shutdown": [
        ("shutdown", None), ("after", ("a", 0.0)), ("after", ("b", 1.0)), ("step", 2.0),
        ("ready", []),
    ],
}  # fmt: skip


async def run_script(queue: DelayingQueue[str], clock: FakeClock, steps: list[Step]) -> None:
    for number, (op, arg) in enumerate(steps):
        if op == "after":
            assert isinstance(arg, tuple)
            queue.add_after(*arg)
        elif op == "add":
            queue.add(str(arg))
        elif op == "shutdown":
            queue.shutdown()
        elif op == "step":
            assert isinstance(arg, float)
            await clock.step(arg)
        elif op == "ready":
            got = []
            while len(queue):
                got.append(await queue.get())
            for key in got:
                queue.done(key)
            assert got == arg, f"step {number}: ready at t={clock.now()}"
        else:
            raise AssertionError(f"unknown op {op!r}")


@pytest.mark.parametrize("steps", SCRIPTS.values(), ids=SCRIPTS.keys())
async def test_delaying_rules(clock: FakeClock, steps: list[Step]) -> None:
    await run_script(DelayingQueue(clock=clock), clock, steps)


async def test_a_waiting_getter_is_woken_when_a_delay_ends(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    getter = asyncio.create_task(queue.get())
    queue.add_after("a", 30.0)
    await clock.step(29.0)
    assert not getter.done()
    await clock.step(1.0)
    assert getter.done()
    assert getter.result() == "a"


async def test_a_getter_waiting_at_shutdown_sees_no_delayed_key(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    getter = asyncio.create_task(queue.get())
    queue.add_after("a", 1.0)
    await clock.step()
    queue.shutdown()
    await clock.step(1.0)
    with pytest.raises(QueueShutDown):
        await getter
    assert clock.next_deadline is None  # its timer was cancelled


async def test_a_thousand_waiting_keys_fire_in_time_order(clock: FakeClock) -> None:
    queue: DelayingQueue[int] = DelayingQueue(clock=clock)
    delays = list(range(1, 1001))
    random.Random(5).shuffle(delays)
    for delay in delays:
        queue.add_after(delay, float(delay))
    assert clock.next_deadline == 1.0
    await clock.step(500.0)
    assert len(queue) == 500
    await clock.step(500.0)
    assert [await queue.get() for _ in range(1000)] == list(range(1, 1001))
