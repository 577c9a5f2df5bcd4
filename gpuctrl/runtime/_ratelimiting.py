"""The rate-limiting layer: ``WorkQueue``, the queue controllers use (client-go
``rate_limiting_queue.go``).

``add_rate_limited(key)`` is ``add_after(key, rate_limiter.when(key))``: a failing key comes
back after a growing delay. ``forget(key)`` clears its history once it succeeded; the caller
still owes ``done(key)``.
"""

from __future__ import annotations

from ._clock import Clock
from ._delaying import DelayingQueue
from ._metrics import QueueMetricsProvider
from ._queue import K
from ._ratelimiter import RateLimiter, default_controller_rate_limiter

__all__ = ["WorkQueue"]


class WorkQueue(DelayingQueue[K]):
    """A work queue with client-go semantics: de-duplicating, never the same key to two workers
    at once, delayed and rate-limited adds, clean shutdown.

    Guarantees and duties are those of ``Queue`` (``get`` must be followed by ``done``) and
    ``DelayingQueue``. ``clock`` drives delays, backoff and metrics (``SystemClock`` unless
    given); ``rate_limiter`` defaults to ``default_controller_rate_limiter(clock)``; ``metrics``
    is ``True`` for ``gpuctrl.runtime.METRICS_REGISTRY``, ``False`` for none, or a provider (an
    unnamed queue has none).
    """

    __slots__ = ("_rate_limiter",)

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter | None = None,
        metrics: bool | QueueMetricsProvider = True,
    ) -> None:
        super().__init__(name, clock=clock, metrics=metrics)
        self._rate_limiter = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(self._clock)
        )

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` after the delay the rate limiter gives for its next retry."""
        self.add_after(key, self._rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Clear ``key``'s retry history (call it when the key succeeded; ``done`` is still
        owed)."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited retries ``key`` had since it was last forgotten."""
        return self._rate_limiter.num_requeues(key)
