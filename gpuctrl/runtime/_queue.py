"""The de-duplicating FIFO at the bottom of the work queue (client-go ``workqueue.Typed``).

Three structures, as in client-go: the ordered ``_queue`` of keys ready to hand out, ``_dirty``
(keys that need processing: queued, or re-added while being processed) and ``_processing``
(keys handed out by ``get`` and not yet ``done``). Their rules give the guarantees:

- a queued key is queued once, however often it is added;
- a key is never handed to two workers at once;
- a key added while it is processed is queued again by ``done``, so no change is lost;
- keys are handed out in the order they became ready, waiting getters in the order they came;
- after ``shutdown`` adds are ignored, queued keys are still handed out, then ``get`` raises
  ``QueueShutDown``.

Everything runs on one event loop, so no locks; ``get`` creates no future while a key is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from ._clock import Clock, SystemClock
from ._errors import QueueShutDown
from ._metrics import QUEUE_METRICS, QueueMetrics, QueueMetricsProvider

__all__ = ["Queue"]

K = TypeVar("K", bound=Hashable)


class Queue(Generic[K]):
    """A de-duplicating FIFO of keys for workers on one event loop (see the module docstring).

    ``name`` labels the queue's metrics (none for an empty name); ``metrics`` is ``True`` for the
    default provider (``gpuctrl.runtime.METRICS_REGISTRY``), ``False`` for none, or a provider.
    """

    __slots__ = (
        "__weakref__",
        "_clock",
        "_dirty",
        "_drained",
        "_getters",
        "_metrics",
        "_now",
        "_processing",
        "_queue",
        "_shutting_down",
        "name",
    )

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics: bool | QueueMetricsProvider = True,
    ) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._now = self._clock.now
        self._queue: deque[K] = deque()  # ready keys in order; each is in _dirty, not _processing
        self._dirty: dict[K, float] = {}  # key -> when it was added; cleared when handed out
        self._processing: dict[K, float] = {}  # key -> when get() handed it out
        self._getters: deque[asyncio.Future[None]] = deque()  # get() calls waiting for a key
        self._shutting_down = False
        self._drained: asyncio.Event | None = None  # set when _processing empties during a drain
        provider = QUEUE_METRICS if metrics is True else metrics
        self._metrics: QueueMetrics | None = (
            provider.for_queue(name, self) if name and provider is not False else None
        )

    def __len__(self) -> int:
        """The number of keys ready to hand out (not those being processed or delayed)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        """Whether ``shutdown`` was called."""
        return self._shutting_down

    def add(self, key: K) -> None:
        """Mark ``key`` as needing processing: queued unless queued already or being processed
        (then ``done`` queues it). Ignored after ``shutdown``."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty[key] = self._now()
        if self._metrics is not None:
            self._metrics.adds += 1
        if key in self._processing:
            return
        self._queue.append(key)
        if self._getters:
            self._wake_getter()

    async def get(self) -> K:
        """The next ready key, waiting for one if needed. The caller owes ``done(key)`` once it
        finished with it. Raises ``QueueShutDown`` once shut down and empty."""
        while not self._queue:
            if self._shutting_down:
                raise QueueShutDown(f"work queue {self.name!r} is shut down")
            await self._wait_for_key()
        key = self._queue.popleft()
        now = self._now()
        added = self._dirty.pop(key)
        self._processing[key] = now
        if self._metrics is not None:
            self._metrics.queue_duration.observe(now - added)
        return key

    def done(self, key: K) -> None:
        """Mark ``key`` as processed; if it was added meanwhile it is queued again. Every key
        from ``get`` needs exactly one ``done``: ``shutdown_with_drain`` waits for it."""
        try:
            started = self._processing.pop(key)
        except KeyError:
            raise ValueError(
                f"done({key!r}) on work queue {self.name!r}: the key is not being processed"
                " (get() did not hand it out, or done() was called twice)"
            ) from None
        if self._metrics is not None:
            self._metrics.work_duration.observe(self._now() - started)
        if key in self._dirty:
            self._queue.append(key)
            if self._getters:
                self._wake_getter()
        elif self._drained is not None and not self._processing:
            self._drained.set()

    def shutdown(self) -> None:
        """Ignore later adds; queued keys are still handed out, then ``get`` raises
        ``QueueShutDown`` (waiting getters are woken to see it)."""
        self._shutting_down = True
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    async def shutdown_with_drain(self) -> None:
        """``shutdown``, then wait until every key handed out is ``done``. Hangs if a worker
        never calls ``done``: bound it with a timeout when workers may be stuck."""
        self.shutdown()
        if not self._processing:
            return
        if self._drained is None or self._drained.is_set():
            self._drained = asyncio.Event()
        await self._drained.wait()

    async def _wait_for_key(self) -> None:
        """Wait until ``add``, ``done`` or ``shutdown`` wakes this getter."""
        getter = asyncio.get_running_loop().create_future()
        self._getters.append(getter)
        try:
            await getter
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled():
                self._wake_getter()  # it was woken for a key: pass the wake-up on
            else:
                with contextlib.suppress(ValueError):  # shutdown may have taken it already
                    self._getters.remove(getter)
            raise

    def _wake_getter(self) -> None:
        """Wake the longest-waiting getter that is still waiting."""
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _gauges(self) -> tuple[int, float, float]:
        """(depth, unfinished seconds, longest running seconds) for the metrics collector."""
        now = self._now()
        started = list(self._processing.values())
        unfinished = sum(now - start for start in started)
        longest = now - min(started) if started else 0.0
        return len(self._dirty), unfinished, longest
