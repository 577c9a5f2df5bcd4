"""The de-duplicating FIFO layer of the work queue (gpuctrl.runtime._queue.Queue)."""

import asyncio
import random

import pytest

from gpuctrl.runtime import QueueShutDown
from gpuctrl.runtime._queue import Queue

Step = tuple[str, object]


async def run_script(queue: Queue[str], steps: list[Step]) -> None:
    """Apply ``steps``: add/done/shutdown act; get/len/get-shutdown check what the queue says."""
    for number, (op, arg) in enumerate(steps):
        where = f"step {number} {op}({arg!r})"
        if op == "add":
            queue.add(str(arg))
        elif op == "done":
            queue.done(str(arg))
        elif op == "shutdown":
            queue.shutdown()
        elif op == "get":
            assert await asyncio.wait_for(queue.get(), 1) == arg, where
        elif op == "len":
            assert len(queue) == arg, where
        elif op == "get-shutdown":
            with pytest.raises(QueueShutDown):
                await queue.get()
        else:
            raise AssertionError(f"unknown op {op!r}")


SCRIPTS: dict[str, list[Step]] = {
    "a queued key is queued once": [
        ("add", "a"), ("add", "a"), ("add", "b"), ("add", "a"), ("len", 2),
        ("get", "a"), ("get", "b"), ("len", 0),
    ],
    "keys come out in the order they were added": [
        ("add", "c"), ("add", "a"), ("add", "b"), ("get", "c"), ("get", "a"), ("get", "b"),
    ],
    "a key added while processed is queued again after done": [
        ("add", "a"), ("get", "a"), ("add", "a"), ("len", 0), ("done", "a"), ("len", 1),
        ("get", "a"), ("done", "a"), ("len", 0),
    ],
    "many adds while processed queue it once": [
        ("add", "a"), ("get", "a"), ("add", "a"), ("add", "a"), ("add", "a"), ("done", "a"),
        ("len", 1),
    ],
    "done without a new add queues nothing": [
        ("add", "a"), ("get", "a"), ("done", "a"), ("len", 0),
    ],
    "a key can be added again once handed out and done": [
        ("add", "a"), ("get", "a"), ("done", "a"), ("add", "a"), ("len", 1), ("get", "a"),
    ],
    "other keys pass a key being processed": [
        ("add", "a"), ("add", "b"), ("get", "a"), ("add", "a"), ("get", "b"), ("done", "a"),
        ("get", "a"),
    ],
    "shutdown ignores adds and still hands out queued keys": [
        ("add", "a"), ("add", "b"), ("shutdown", None), ("add", "c"), ("len", 2),
        ("get", "a"), ("get", "b"), ("get-shutdown", None), ("get-shutdown", None),
    ],
    "a key re-added before shutdown is handed out after done": [
        ("add", "a"), ("get", "a"), ("add", "a"), ("shutdown", None), ("done", "a"),
        ("get", "a"), ("done", "a"), ("get-shutdown", None),
    ],
    "an add after shutdown during processing is dropped": [
        ("add", "a"), ("get", "a"), ("shutdown", None), ("add", "a"), ("done", "a"),
        ("len", 0), ("get-shutdown", None),
    ],
}  # fmt: skip


@pytest.mark.parametrize("steps", SCRIPTS.values(), ids=SCRIPTS.keys())
async def test_queue_rules(steps: list[Step]) -> None:
    await run_script(Queue(), steps)


@pytest.mark.parametrize(
    ("setup", "queued"),
    [
        pytest.param([], 0, id="never added"),
        pytest.param([("add", "a")], 1, id="queued but not handed out"),
        pytest.param([("add", "a"), ("get", "a"), ("done", "a")], 0, id="done twice"),
    ],
)
async def test_done_on_a_key_not_being_processed_is_an_error(
    setup: list[Step], queued: int
) -> None:
    queue: Queue[str] = Queue("fifo-misuse", metrics=False)
    await run_script(queue, setup)
    with pytest.raises(ValueError, match=r"done\('a'\) on work queue 'fifo-misuse'.*not being"):
        queue.done("a")
    assert len(queue) == queued  # the misuse changed nothing


async def test_a_waiting_getter_receives_a_later_add() -> None:
    queue: Queue[str] = Queue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.add("a")
    assert await asyncio.wait_for(getter, 1) == "a"


async def test_waiting_getters_are_served_in_arrival_order() -> None:
    queue: Queue[str] = Queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    for key in "xyz":
        queue.add(key)
    assert await asyncio.wait_for(asyncio.gather(*getters), 1) == ["x", "y", "z"]


async def test_a_key_re_added_while_processed_waits_for_done_not_a_second_worker() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    assert await queue.get() == "a"
    second_worker = asyncio.create_task(queue.get())
    queue.add("a")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not second_worker.done()
    queue.done("a")
    assert await asyncio.wait_for(second_worker, 1) == "a"


async def test_shutdown_wakes_waiting_getters_with_queue_shut_down() -> None:
    queue: Queue[str] = Queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(2)]
    await asyncio.sleep(0)
    queue.shutdown()
    assert queue.shutting_down
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), 1)
    assert all(isinstance(result, QueueShutDown) for result in results)


async def test_a_cancelled_getter_loses_no_key() -> None:
    queue: Queue[str] = Queue()
    cancelled = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    queue.add("a")
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_a_getter_cancelled_after_its_wake_up_passes_it_on() -> None:
    queue: Queue[str] = Queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await asyncio.wait_for(second, 1) == "a"
    assert first.cancelled()


async def test_shutdown_with_drain_waits_for_every_key_in_progress() -> None:
    queue: Queue[str] = Queue()
    for key in "ab":
        queue.add(key)
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    drain = asyncio.create_task(queue.shutdown_with_drain())
    await asyncio.sleep(0)
    assert queue.shutting_down
    queue.done("a")
    await asyncio.sleep(0)
    assert not drain.done()
    queue.done("b")
    await asyncio.wait_for(drain, 1)


async def test_shutdown_with_drain_returns_at_once_when_nothing_is_processed() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    await asyncio.wait_for(queue.shutdown_with_drain(), 1)
    assert await queue.get() == "a"  # queued keys are still handed out


async def test_many_workers_never_share_a_key_and_lose_no_add() -> None:
    """Random adds against four workers: no key is processed twice at once, and every key's
    last processing started after its last add."""
    queue: Queue[int] = Queue()
    rng = random.Random(5)
    in_flight: set[int] = set()
    last_add: dict[int, int] = {}
    last_start: dict[int, int] = {}
    clock = iter(range(10**9))

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            assert key not in in_flight
            in_flight.add(key)
            last_start[key] = next(clock)
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            in_flight.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for _ in range(2000):
        key = rng.randrange(10)
        last_add[key] = next(clock)
        queue.add(key)
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    queue.shutdown()  # the workers finish what is queued, then stop
    await asyncio.wait_for(asyncio.gather(*workers), 5)
    assert all(last_start[key] > added for key, added in last_add.items())
