"""Exponential backoff with jitter for reconnecting to the API server."""

from __future__ import annotations

import random

__all__ = ["Backoff", "backoff_delay"]


def backoff_delay(failures: int, u: float, *, initial: float, cap: float) -> float:
    """The delay after ``failures`` consecutive failures (>= 1): ``initial`` doubling per
    failure up to ``cap``, then scaled into [75 %, 100 %] by ``u`` in [0, 1) (jitter)."""
    delay = min(cap, initial * 2.0 ** min(failures - 1, 64))
    return delay * (0.75 + u / 4)


class Backoff:
    """Counts consecutive failures and says how long to wait after each; `reset` on success."""

    def __init__(self, initial: float = 0.8, cap: float = 30.0) -> None:
        self.initial = initial
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        """Record one more failure and return the seconds to wait before trying again."""
        self.failures += 1
        return backoff_delay(self.failures, random.random(), initial=self.initial, cap=self.cap)

    def reset(self) -> None:
        """Forget the failures (call after a success)."""
        self.failures = 0
