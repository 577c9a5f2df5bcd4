"""A controller: a named reconciler, its work queue, its watches and its workers.

Workers take keys from the queue and apply the reconcile contract (documented once, in
`gpuctrl.runtime._reconcile`) in `Controller._reconcile`'s single switch, the one place where
a reconciler's exceptions are caught. Metrics carry controller-runtime's names.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import Counter, Gauge, Histogram

from ._clock import Clock, SystemClock
from ._enqueue import Mapper, WatchHandler, request_for_object
from ._errors import (
    TRANSIENT_ERRORS,
    Conflict,
    QueueShutDown,
    ServerError,
    TerminalError,
    TooManyRequests,
)
from ._informer import Informer
from ._log import LOG_CONTEXT
from ._metrics import METRICS_REGISTRY
from ._predicates import Predicate
from ._ratelimiter import RateLimiter
from ._ratelimiting import WorkQueue
from ._reconcile import Request, Result

__all__ = ["Controller", "Reconciler"]

log = logging.getLogger("gpuctrl.runtime.controller")

# Failures that come from the cluster's state or reachability (a write lost a race, the
# apiserver is restarting or throttling): logged in one line, without a traceback.
_TRANSIENT = (Conflict, ServerError, TooManyRequests, *TRANSIENT_ERRORS)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


_SLICE = 0.002  # seconds a worker may run reconciles that never await before it yields

Reconciler = Callable[[Request], Awaitable[Result | None]]
"""``async def reconcile(request) -> Result | None``; see the contract in `_reconcile`."""

# controller-runtime's buckets: 5 ms to 60 s
_RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7),
    *(0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20),
    *(25, 30, 40, 50, 60),
)
_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller.",
    ["controller", "result"],
    registry=METRICS_REGISTRY,
)
_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller.",
    ["controller"],
    registry=METRICS_REGISTRY,
)
_TERMINAL = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller.",
    ["controller"],
    registry=METRICS_REGISTRY,
)
_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller.",
    ["controller"],
    registry=METRICS_REGISTRY,
    buckets=_RECONCILE_BUCKETS,
)
_ACTIVE = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller.",
    ["controller"],
    registry=METRICS_REGISTRY,
)
_MAX = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller.",
    ["controller"],
    registry=METRICS_REGISTRY,
)


class Controller:
    """Runs ``reconciler`` for the keys its watches enqueue, on ``max_concurrent_reconciles``
    workers, until stopped. It needs the leader (a manager runs it only while leading).

    On stop it takes no new keys, waits up to ``drain_timeout`` seconds for the reconciles in
    flight, then cancels what is left. ``clock`` (`SystemClock` unless given) times the work
    queue's delays and backoff, the drain and the reconcile-time metric.
    """

    needs_leader = True

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        drain_timeout: float = 30.0,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError(
                f"max_concurrent_reconciles must be >= 1, got {max_concurrent_reconciles}"
            )
        self.name = name
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.queue: WorkQueue[Request] = WorkQueue(
            name, clock=self._clock, rate_limiter=rate_limiter
        )
        self._reconciler = reconciler
        self._workers = max_concurrent_reconciles
        self._drain_timeout = drain_timeout
        self._stopping = False
        self._outcomes = {
            r: _TOTAL.labels(name, r) for r in ("success", "error", "requeue", "requeue_after")
        }
        self._errors = _ERRORS.labels(name)
        self._terminal = _TERMINAL.labels(name)
        self._time = _TIME.labels(name)
        self._running = 0  # reconciles in flight: read by the gauge when scraped, not set each time
        _ACTIVE.labels(name).set_function(_running_of(weakref.ref(self)))

    def watch(
        self,
        informer: Informer,
        mapper: Mapper = request_for_object,
        predicates: Sequence[Predicate] = (),
    ) -> None:
        """Enqueue ``mapper``'s requests for every event of ``informer`` passing all
        ``predicates``."""
        informer.add_handler(WatchHandler(self.queue, mapper, predicates))

    async def start(self, stop: asyncio.Event) -> None:
        """Run the workers until ``stop`` is set, then drain (bounded) and return. Cancelling
        this coroutine cancels the reconciles in flight at once (e.g. the lease was lost)."""
        _MAX.labels(self.name).set(self._workers)
        workers = [asyncio.create_task(self._work()) for _ in range(self._workers)]
        try:
            await stop.wait()
            self._stopping = True
            self.queue.shutdown()
            pending = await self._clock.wait_tasks(workers, self._drain_timeout)
            if pending:
                log.warning("%s: cancelling %d reconciles still running", self.name, len(pending))
        finally:
            self._stopping = True
            self.queue.shutdown()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        yielded = loop.time()
        while True:
            try:
                request = await self.queue.get()
            except QueueShutDown:
                return
            try:
                if self._stopping:
                    return
                await self._reconcile(request)
            finally:
                self.queue.done(request)
            # Reconciles that never await (converged, cache-only passes) must not keep the
            # loop: let watches, Lease renewal and probes run at least every _SLICE seconds
            # (not after every key: one pass of the loop costs as much as such a reconcile).
            if loop.time() - yielded >= _SLICE:
                await asyncio.sleep(0)
                yielded = loop.time()

    async def _reconcile(self, request: Request) -> None:
        """Reconcile one key and apply the contract: the one switch over its outcomes."""
        token = LOG_CONTEXT.set({"controller": self.name, "key": str(request)})
        self._running += 1
        started = self._clock.now()
        try:
            result = await _shielded_from_stray_cancellation(self._reconciler(request))
        except TerminalError:
            log.exception("reconcile failed terminally; not retrying")
            self._errors.inc()
            self._terminal.inc()
            self._outcomes["error"].inc()
            self.queue.forget(request)
        except Exception as error:
            if isinstance(error, _TRANSIENT):  # the cluster's state, not a bug: one line
                log.warning("reconcile failed, retrying with backoff: %s", _describe(error))
            else:
                log.exception("reconcile failed; retrying with backoff")
            self._errors.inc()
            self._outcomes["error"].inc()
            self.queue.add_rate_limited(request)
        else:
            if result is not None and (result.requeue_after or 0) > 0:
                self.queue.forget(request)
                self._outcomes["requeue_after"].inc()
                self.queue.add_after(request, result.requeue_after or 0)
            elif result is not None and result.requeue:
                self._outcomes["requeue"].inc()
                self.queue.add_rate_limited(request)
            else:
                self.queue.forget(request)
                self._outcomes["success"].inc()
        finally:
            self._time.observe(self._clock.now() - started)
            self._running -= 1
            LOG_CONTEXT.reset(token)


def _running_of(controller: weakref.ref[Controller]) -> Callable[[], float]:
    """How many reconciles the controller runs now (0 once it is gone)."""

    def running() -> float:
        alive = controller()
        return 0 if alive is None else alive._running

    return running


async def _shielded_from_stray_cancellation(reconciling: Awaitable[Result | None]) -> Result | None:
    """Await a reconcile; a ``CancelledError`` it raises while its worker is not being
    cancelled (e.g. from awaiting a task someone else cancelled) becomes a plain error."""
    try:
        return await reconciling
    except asyncio.CancelledError as error:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise RuntimeError("the reconciler raised CancelledError") from error
