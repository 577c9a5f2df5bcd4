"""One injected clock flows from a Manager to its informers, controllers and leader election.

Each test builds a Manager on a hand-stepped FakeClock and an API server address where nothing
listens, and observes timing that only the fake clock can produce: requests fail at once, so
whatever waits afterwards waits on the clock it was given.
"""

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from gpuctrl.runtime import LeaderElection, Manager, Request, Resource, Result
from gpuctrl.testing import FakeClock, eventually

CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")


@pytest.fixture
async def manager(clock: FakeClock) -> AsyncIterator[Callable[..., Manager]]:
    """Builds managers on ``clock`` whose API server refuses connections (closed after)."""
    clients: list[ApiClient] = []

    def build(**options: object) -> Manager:
        clients.append(ApiClient(Configuration(host="http://127.0.0.1:1")))
        defaults: dict[str, object] = {
            "metrics_bind_address": None,
            "health_probe_bind_address": None,
            "clock": clock,
        }
        return Manager(clients[-1], **{**defaults, **options})  # type: ignore[arg-type]

    yield build
    for client in clients:
        await client.close()


async def until(condition: Callable[[], bool]) -> None:
    """Let real I/O (refused connections) happen until ``condition`` holds (5 s at most)."""
    await eventually(condition, within=5, interval=0.01)


async def next_wait(clock: FakeClock) -> float:
    """The deadline of the first timer set on ``clock``, once something waits on it."""

    def pending() -> float:
        deadline = clock.next_deadline
        assert deadline is not None, "nothing waits on the clock yet"
        return deadline

    return await eventually(pending, within=5, interval=0.01)


async def test_informers_back_off_on_the_managers_clock(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    cache = manager().cache
    cache.informer(CONFIGMAPS)
    stop = asyncio.Event()
    running = asyncio.create_task(cache.start(stop))
    try:
        first = await next_wait(clock)
        assert 0.6 <= first <= 0.8  # the first pause: 0.8 s, jittered
        await clock.step(first)
        second = await next_wait(clock)
        assert 1.2 <= second - first <= 1.6  # doubled, in fake time
    finally:
        stop.set()
        await running


async def test_controllers_requeue_on_the_managers_clock(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    calls: list[float] = []

    async def requeue(request: Request) -> Result:
        calls.append(clock.now())
        return Result(requeue_after=10.0)

    built = manager()
    controller = built.add_controller("clock-requeue", requeue, for_=CONFIGMAPS)
    built.cache.informer(CONFIGMAPS).replace([])  # synced by hand: no server to list from
    stop = asyncio.Event()
    running = asyncio.create_task(built.start(stop))
    try:
        controller.queue.add(Request("ns", "a"))
        await until(lambda: len(calls) == 1)
        await clock.step(9.9)
        assert len(calls) == 1
        await clock.step(0.1)
        await until(lambda: len(calls) == 2)
        assert calls == [0.0, 10.0]
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


async def test_controllers_drain_for_the_graceful_timeout_in_fake_time(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    reconciling, cancelled = asyncio.Event(), asyncio.Event()

    async def hangs(request: Request) -> None:
        reconciling.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    built = manager(graceful_shutdown_timeout=30.0)
    controller = built.add_controller("clock-drain", hangs, for_=CONFIGMAPS)
    built.cache.informer(CONFIGMAPS).replace([])  # synced by hand: no server to list from
    stop = asyncio.Event()
    running = asyncio.create_task(built.start(stop))
    controller.queue.add(Request("ns", "a"))
    await until(reconciling.is_set)
    stop.set()
    await clock.step(29.9)
    assert not running.done()  # the drain waits on the manager's clock ...
    await clock.step(0.1)
    await asyncio.wait_for(running, 5)  # ... and ends at its bound, cancelling the reconcile
    assert cancelled.is_set()


async def test_leader_election_retries_on_the_managers_clock(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    built = manager(leader_election=LeaderElection("lease", "ns", retry_period=2.0))
    stop = asyncio.Event()
    running = asyncio.create_task(built.start(stop))
    try:
        deadline = await next_wait(clock)
        assert 2.0 <= deadline <= 2.2  # retry_period, jittered +10 %
        assert not built.is_leader
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


class Hangs:
    """A runnable that ignores its stop event until cancelled."""

    def __init__(self, needs_leader: bool) -> None:
        self.needs_leader = needs_leader
        self.started = asyncio.Event()
        self.cancelled_at: float | None = None

    async def start(self, stop: asyncio.Event) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled_at = asyncio.get_running_loop().time()
            raise


async def test_leader_and_base_drains_share_one_shutdown_budget(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    built = manager(graceful_shutdown_timeout=25.0)
    leader, base = Hangs(needs_leader=True), Hangs(needs_leader=False)
    built.add(leader)
    built.add(base)
    stop = asyncio.Event()
    running = asyncio.create_task(built.start(stop))
    await until(lambda: leader.started.is_set() and base.started.is_set())
    stop.set()
    await clock.step(24.9)
    assert not running.done()
    await clock.step(0.1)  # 25 s in all, not 25 s for the leaders and 25 more for the rest
    await asyncio.wait_for(running, 5)
    assert leader.cancelled_at is not None
    assert base.cancelled_at is not None


async def test_runnables_not_needing_the_leader_run_on_a_standby(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    built = manager(leader_election=LeaderElection("lease", "ns", retry_period=2.0))
    leader, base = Hangs(needs_leader=True), Hangs(needs_leader=False)
    built.add(leader)
    built.add(base)
    stop = asyncio.Event()
    running = asyncio.create_task(built.start(stop))
    try:
        await until(base.started.is_set)  # the API server is unreachable: never the leader
        assert not built.is_leader
        assert not leader.started.is_set()
    finally:
        stop.set()
        await until(lambda: clock.next_deadline is not None)
        await clock.step(25.0)  # the hanging runnable is cancelled at the budget's end
        await asyncio.wait_for(running, 5)


async def test_healthz_fails_once_the_manager_stops(
    manager: Callable[..., Manager], clock: FakeClock
) -> None:
    built = manager(health_probe_bind_address="127.0.0.1:0", graceful_shutdown_timeout=25.0)
    leader = Hangs(needs_leader=True)
    built.add(leader)
    stop = asyncio.Event()
    running = asyncio.create_task(built.start(stop))
    async with aiohttp.ClientSession() as http:
        await until(leader.started.is_set)
        url = f"http://127.0.0.1:{built.health_probe_port}/healthz"
        async with http.get(url) as response:
            assert response.status == 200
        stop.set()  # draining now: alive, but no longer healthy
        await until(lambda: clock.next_deadline is not None)
        async with http.get(url) as response:
            assert response.status == 500
            assert "[-]manager failed" in await response.text()
    await clock.step(25.0)
    await asyncio.wait_for(running, 5)
