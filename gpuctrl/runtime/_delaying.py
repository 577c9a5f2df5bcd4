"""The delaying layer of the work queue (client-go ``delaying_queue.go``).

``add_after(key, seconds)`` adds ``key`` once ``seconds`` have passed on the queue's clock.
A key waits at most once: asking again for a later time changes nothing, for an earlier time
moves it earlier (sooner wins); ``seconds <= 0`` is a plain ``add``. Waiting keys sit in a heap
ordered by ready time with one clock timer armed for the head, so no task runs per key.
``shutdown`` drops the waiting keys.
"""

from __future__ import annotations

import heapq
import itertools
import math

from ._clock import Clock, TimerHandle
from ._metrics import QueueMetricsProvider
from ._queue import K, Queue

__all__ = ["DelayingQueue"]


class DelayingQueue(Queue[K]):
    """A ``Queue`` whose keys can also be added after a delay (see the module docstring)."""

    __slots__ = ("_heap", "_sequence", "_timer", "_timer_at", "_waiting")

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics: bool | QueueMetricsProvider = True,
    ) -> None:
        super().__init__(name, clock=clock, metrics=metrics)
        self._waiting: dict[K, float] = {}  # key -> the earliest time it was asked for
        # (ready time, tie-breaker, key); an entry whose time is not _waiting[key] is stale.
        self._heap: list[tuple[float, int, K]] = []
        self._sequence = itertools.count()
        self._timer: TimerHandle | None = None  # armed for _timer_at, the earliest ready time
        self._timer_at = math.inf

    def add_after(self, key: K, seconds: float) -> None:
        """Add ``key`` after ``seconds`` (now if ``seconds <= 0``); a key already waiting only
        moves earlier. Ignored after ``shutdown``. Every call counts as a retry in the metrics."""
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retries += 1
        if seconds <= 0:
            self.add(key)
            return
        ready_at = self._now() + seconds
        if self._waiting.get(key, math.inf) <= ready_at:
            return
        self._waiting[key] = ready_at
        heapq.heappush(self._heap, (ready_at, next(self._sequence), key))
        if ready_at < self._timer_at:
            self._arm(ready_at)

    def shutdown(self) -> None:
        """As ``Queue.shutdown``; keys still waiting for their delay are dropped."""
        super().shutdown()
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
        self._waiting.clear()
        self._heap.clear()

    def _arm(self, ready_at: float) -> None:
        """(Re)arm the one timer for the earliest ready time."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = ready_at
        self._timer = self._clock.call_at(ready_at, self._add_ready)

    def _add_ready(self) -> None:
        """Timer callback: add every key whose time has come, then re-arm for the next one."""
        self._timer, self._timer_at = None, math.inf
        now = self._now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            ready_at, _, key = heapq.heappop(heap)
            if self._waiting.get(key) == ready_at:
                del self._waiting[key]
                self.add(key)
        if heap:
            self._arm(heap[0][0])
