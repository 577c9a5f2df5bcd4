"""The reconcile contract, applied by the controller's workers (virtual time, no cluster)."""

import asyncio
import io
import itertools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gpuctrl.runtime import (
    METRICS_REGISTRY,
    Conflict,
    Controller,
    Request,
    Result,
    TerminalError,
    configure_logging,
)
from gpuctrl.runtime._controller import _SLICE
from gpuctrl.testing import FakeClock

A, B = Request("ns", "a"), Request("ns", "b")
_names = itertools.count()

Reconcile = Callable[[Request], Awaitable[Result | None]]


class Running:
    """A controller started in the background on a fake clock."""

    def __init__(self, controller: Controller, clock: FakeClock) -> None:
        self.controller = controller
        self.clock = clock
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(controller.start(self.stop))

    async def run_until(self, condition: Callable[[], bool], limit: float = 2000.0) -> None:
        """Step virtual time timer by timer until ``condition`` holds (or ``limit`` passes)."""
        await self.clock.step()
        while not condition() and self.clock.now() < limit:
            deadline = self.clock.next_deadline
            if deadline is None:
                break
            await self.clock.step(deadline - self.clock.now())

    def metric(self, name: str, **labels: str) -> float:
        value = METRICS_REGISTRY.get_sample_value(
            name, {"controller": self.controller.name, **labels}
        )
        return value or 0.0


@pytest.fixture
async def start(clock: FakeClock) -> AsyncIterator[Callable[..., Running]]:
    started: list[Running] = []

    def start_controller(reconcile: Reconcile, **options: object) -> Running:
        name = f"test-{next(_names)}"
        running = Running(Controller(name, reconcile, clock=clock, **options), clock)  # type: ignore[arg-type]
        started.append(running)
        return running

    yield start_controller
    for running in started:
        running.stop.set()
        await asyncio.gather(running.task, return_exceptions=True)


async def test_exception_requeues_with_growing_delays(start: Callable[..., Running]) -> None:
    calls: list[float] = []

    async def failing(request: Request) -> None:
        calls.append(running.clock.now())
        raise RuntimeError("boom")

    running = start(failing)
    running.controller.queue.add(A)
    await running.run_until(lambda: len(calls) >= 6)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(calls)]
    assert gaps == [0.005, 0.01, 0.02, 0.04, 0.08]
    assert running.controller.queue.num_requeues(A) == 6
    assert running.metric("controller_runtime_reconcile_errors_total") == 6
    assert running.metric("controller_runtime_reconcile_total", result="error") == 6


async def test_a_lost_write_race_is_one_warning_line_and_a_bug_a_traceback(
    start: Callable[..., Running], caplog: pytest.LogCaptureFixture
) -> None:
    failures = iter([Conflict(409, "Conflict", "the object has been modified"), KeyError("bug")])

    async def reconcile(request: Request) -> None:
        raise next(failures)

    running = start(reconcile)
    caplog.set_level(logging.WARNING, logger="gpuctrl.runtime.controller")
    running.controller.queue.add(A)
    await running.run_until(lambda: len(caplog.records) >= 2)
    conflict, bug = caplog.records[:2]
    assert conflict.levelno == logging.WARNING
    assert conflict.exc_info is None
    assert "retrying with backoff: Conflict" in conflict.getMessage()
    assert bug.levelno == logging.ERROR
    assert bug.exc_info is not None
    assert running.metric("controller_runtime_reconcile_errors_total") == 2
    assert running.controller.queue.num_requeues(A) == 2


async def test_terminal_error_is_counted_and_not_retried(start: Callable[..., Running]) -> None:
    calls: list[Request] = []

    async def terminal(request: Request) -> None:
        calls.append(request)
        raise TerminalError("cannot fix this")

    running = start(terminal)
    running.controller.queue.add(A)
    await running.run_until(lambda: False, limit=5000)
    assert calls == [A]
    assert running.metric("controller_runtime_terminal_reconcile_errors_total") == 1
    assert running.metric("controller_runtime_reconcile_errors_total") == 1
    assert running.controller.queue.num_requeues(A) == 0


async def test_requeue_after_forgets_then_delays(start: Callable[..., Running]) -> None:
    calls: list[float] = []
    outcomes = iter([RuntimeError("once"), Result(requeue_after=7), Result(requeue_after=7), None])

    async def reconcile(request: Request) -> Result | None:
        calls.append(running.clock.now())
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    running = start(reconcile)
    running.controller.queue.add(A)
    await running.run_until(lambda: len(calls) >= 4)
    await running.run_until(lambda: False, limit=100)
    assert calls == pytest.approx([0.0, 0.005, 7.005, 14.005])
    assert running.controller.queue.num_requeues(A) == 0
    assert running.metric("controller_runtime_reconcile_total", result="requeue_after") == 2
    assert running.metric("controller_runtime_reconcile_total", result="success") == 1


async def test_a_failing_key_does_not_stop_the_worker(start: Callable[..., Running]) -> None:
    done: list[Request] = []

    async def reconcile(request: Request) -> None:
        if request == A:
            raise ValueError("a is broken")
        done.append(request)

    running = start(reconcile)
    running.controller.queue.add(A)
    running.controller.queue.add(B)
    await running.run_until(lambda: bool(done) and running.controller.queue.num_requeues(A) > 3)
    assert done == [B]
    assert not running.task.done()


async def test_workers_run_keys_concurrently_up_to_the_limit(
    start: Callable[..., Running],
) -> None:
    release = asyncio.Event()
    active: list[Request] = []
    peak = 0

    async def slow(request: Request) -> None:
        nonlocal peak
        active.append(request)
        peak = max(peak, len(active))
        await release.wait()
        active.remove(request)

    running = start(slow, max_concurrent_reconciles=3)
    for i in range(5):
        running.controller.queue.add(Request("ns", f"k{i}"))
    await running.clock.step()
    assert len(active) == 3
    assert running.metric("controller_runtime_active_workers") == 3
    assert running.metric("controller_runtime_max_concurrent_reconciles") == 3
    release.set()
    await running.run_until(lambda: len(running.controller.queue) == 0 and not active)
    assert peak == 3


async def test_stop_drains_in_flight_and_takes_no_new_work(start: Callable[..., Running]) -> None:
    started: list[Request] = []
    finished: list[Request] = []
    proceed = asyncio.Event()

    async def reconcile(request: Request) -> None:
        started.append(request)
        await proceed.wait()
        finished.append(request)

    running = start(reconcile)
    running.controller.queue.add(A)
    running.controller.queue.add(B)
    await running.clock.step()
    running.stop.set()
    await running.clock.step()
    proceed.set()
    await asyncio.wait_for(running.task, 5)
    assert started == [A]
    assert finished == [A]


async def test_drain_is_bounded_a_hung_reconcile_is_cancelled(
    start: Callable[..., Running], caplog: pytest.LogCaptureFixture
) -> None:
    cancelled = asyncio.Event()

    async def hangs(request: Request) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    running = start(hangs, drain_timeout=30.0)
    running.controller.queue.add(A)
    await running.clock.step()
    running.stop.set()
    await running.clock.step(29.9)
    assert not running.task.done()  # the drain waits on the controller's clock ...
    await running.clock.step(0.1)
    assert running.task.done()  # ... and returns at its bound although the reconcile never does
    await running.task
    assert cancelled.is_set()
    assert "cancelling 1 reconciles still running" in caplog.text


async def test_reconcile_time_is_measured_on_the_controllers_clock(
    start: Callable[..., Running],
) -> None:
    async def slow(request: Request) -> None:
        await running.clock.sleep(3.0)

    running = start(slow)
    running.controller.queue.add(A)
    await running.run_until(
        lambda: running.metric("controller_runtime_reconcile_total", result="success") == 1
    )
    assert running.metric("controller_runtime_reconcile_time_seconds_sum") == 3.0


async def test_reconciler_logs_carry_controller_and_key() -> None:
    stream = io.StringIO()
    handler = configure_logging(json_lines=True, stream=stream)
    level = logging.getLogger().level
    logged = asyncio.Event()

    async def reconcile(request: Request) -> None:
        logging.getLogger("test.reconciler").info("reconciling")
        logged.set()

    controller = Controller("logging", reconcile)
    stop = asyncio.Event()
    task = asyncio.create_task(controller.start(stop))
    try:
        controller.queue.add(A)
        await asyncio.wait_for(logged.wait(), 5)
    finally:
        stop.set()
        await task
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
    [line] = [json.loads(line) for line in stream.getvalue().splitlines() if "reconciling" in line]
    assert line["controller"] == "logging"
    assert line["key"] == "ns/a"
    assert line["logger"] == "test.reconciler"


async def test_cancel_stops_in_flight_reconciles_at_once(start: Callable[..., Running]) -> None:
    cancelled = asyncio.Event()

    async def forever(request: Request) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    running = start(forever)
    running.controller.queue.add(A)
    await running.clock.step()
    running.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running.task
    assert cancelled.is_set()


@pytest.mark.parametrize("delay", [0, -1.0], ids=["zero", "negative"])
async def test_requeue_after_not_positive_is_a_plain_success(
    start: Callable[..., Running], delay: float
) -> None:
    calls: list[float] = []

    async def spin(request: Request) -> Result | None:
        calls.append(running.clock.now())
        return Result(requeue_after=delay) if len(calls) < 3 else None

    running = start(spin)
    running.controller.queue.add(A)
    await running.run_until(lambda: len(calls) >= 3, limit=60)
    assert calls == [0.0]
    assert running.metric("controller_runtime_reconcile_total", result="success") == 1
    assert running.metric("controller_runtime_reconcile_total", result="requeue_after") == 0


async def test_requeue_true_is_a_rate_limited_requeue(start: Callable[..., Running]) -> None:
    calls: list[float] = []

    async def again(request: Request) -> Result:
        calls.append(running.clock.now())
        return Result(requeue=True)

    running = start(again)
    running.controller.queue.add(A)
    await running.run_until(lambda: len(calls) >= 4)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(calls)]
    assert gaps[:3] == [0.005, 0.01, 0.02]
    assert running.metric("controller_runtime_reconcile_total", result="requeue") >= 3
    assert running.metric("controller_runtime_reconcile_errors_total") == 0


async def test_workers_yield_to_the_loop_between_long_keys(start: Callable[..., Running]) -> None:
    """Reconciles that never await (converged, cache-only passes) must still let the rest of
    the event loop (watches, Lease renewal, probes) run every ``_SLICE`` seconds: when each
    such reconcile takes a slice of CPU, a callback scheduled by one has run before the next
    one starts. (Shorter ones run back to back within a slice: a pass of the loop per key
    would cost as much as the reconcile.)"""
    loop = asyncio.get_running_loop()
    ran_between: list[bool] = []
    pending = [True]

    async def busy(request: Request) -> None:
        ran_between.append(pending[0])
        pending[0] = False
        loop.call_soon(pending.__setitem__, 0, True)
        until = loop.time() + _SLICE
        while loop.time() < until:  # a slice of CPU, no await
            pass

    running = start(busy)
    for i in range(20):
        running.controller.queue.add(Request("ns", f"k{i}"))
    await running.run_until(lambda: len(ran_between) >= 20, limit=5)
    assert len(ran_between) == 20
    assert all(ran_between), "keys of a slice each ran back to back without yielding"
