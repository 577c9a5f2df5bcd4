"""Rate limiters: how long a key should wait before its next retry (client-go
``default_rate_limiters.go``).

A limiter answers ``when(key)`` (the delay for this retry, counting it), ``forget(key)`` (the
key succeeded: clear its history) and ``num_requeues(key)``. The controller default is the
longer of a per-key exponential backoff (5 ms doubling to 1000 s) and an overall token bucket
(10 per second, burst 100) that paces retries of all keys together.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from ._clock import Clock, SystemClock

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]


class RateLimiter(Protocol):
    """Decides retry delays per key (client-go ``TypedRateLimiter``)."""

    def when(self, key: Hashable) -> float:
        """Seconds ``key`` should wait before its next retry; counts this retry."""
        ...

    def forget(self, key: Hashable) -> None:
        """Clear ``key``'s retry history (it succeeded, or is given up)."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """How many retries of ``key`` were counted since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-key backoff: ``base * 2**failures`` seconds, at most ``cap``."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"need 0 < base <= cap, got base={base!r}, cap={cap!r}")
        self._base = base
        self._cap = cap
        self._failures: dict[Hashable, int] = {}  # key -> retries counted since forget

    def when(self, key: Hashable) -> float:
        """``base * 2**n`` for the n-th retry of ``key`` (n from 0), capped; counts it."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # 2.0**1023 is the largest finite power; any product beyond the cap is the cap.
        return min(self._base * 2.0 ** min(failures, 1023), self._cap)

    def forget(self, key: Hashable) -> None:
        """Start ``key``'s backoff again from ``base``."""
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        """Retries of ``key`` since it was last forgotten."""
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """An overall token bucket shared by all keys: ``burst`` retries at once, then ``qps`` per
    second (golang.org/x/time/rate reservations). Keeps no per-key history."""

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, got qps={qps!r}, burst={burst!r}")
        self._qps = qps
        self._burst = burst
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._tokens = float(burst)  # may go negative: tokens reserved ahead of time
        self._updated: float | None = None  # clock time _tokens was last brought up to date

    def when(self, key: Hashable) -> float:
        """Reserve one token; the delay until it is available (0 while the burst lasts)."""
        now = self._clock.now()
        if self._updated is not None:
            refill = max(0.0, now - self._updated) * self._qps
            self._tokens = min(float(self._burst), self._tokens + refill)
        self._updated = now
        self._tokens -= 1.0
        return -self._tokens / self._qps if self._tokens < 0 else 0.0

    def forget(self, key: Hashable) -> None:
        """Nothing: the bucket keeps no per-key history."""

    def num_requeues(self, key: Hashable) -> int:
        """Always 0: the bucket keeps no per-key history."""
        return 0


class MaxOfRateLimiter:
    """The longest delay any of ``limiters`` asks for; every limiter counts every retry."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        """The maximum of every limiter's ``when(key)`` (all are asked, so all count)."""
        return max([limiter.when(key) for limiter in self._limiters])

    def forget(self, key: Hashable) -> None:
        """Forget ``key`` in every limiter."""
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        """The largest count any limiter keeps for ``key``."""
        return max(limiter.num_requeues(key) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock | None = None) -> RateLimiter:
    """client-go's controller default: max of 5 ms..1000 s per-key backoff and a 10 qps,
    burst 100 bucket (on ``clock``)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(10.0, 100, clock=clock),
    )
