"""``FakeClock``: virtual time for gpuctrl.runtime, stepped by hand or jumping ahead by itself.

Time stands still until ``advance(seconds)`` (or ``await step(seconds)``) moves it; timers due
by then run in time order, each seeing ``now()`` equal to its own deadline. With
``autojump_threshold`` set, a watcher task jumps to the next timer's deadline whenever the
event loop has had nothing ready to run for that many real seconds (trio's ``MockClock``
autojump), so code that sleeps for minutes runs in milliseconds. "Nothing ready" is read from
the event loop's ready queue (asyncio's default loop): a task waiting on a socket counts as
idle, so keep a non-zero threshold where real I/O must finish before virtual time moves on.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from types import TracebackType

from gpuctrl.runtime import Clock

__all__ = ["FakeClock"]


class _Timer:
    """A scheduled callback of a FakeClock; ``cancel()`` keeps it from running."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        if not self.cancelled:
            self.cancelled = True  # runs at most once
            self.callback()


class FakeClock(Clock):
    """Virtual monotonic time starting at ``start``; see the module docstring.

    ``autojump_threshold``: ``None`` (default) never moves time by itself; a number of real
    seconds (``0`` included) lets the clock jump to its next timer when, that long after its
    last look, no timer was set and the loop has nothing ready to run.
    Call ``close()`` (or use ``with FakeClock(...)``) to stop the autojump watcher.
    """

    def __init__(self, start: float = 0.0, *, autojump_threshold: float | None = None) -> None:
        if autojump_threshold is not None and autojump_threshold < 0:
            raise ValueError(f"autojump_threshold must be >= 0, got {autojump_threshold!r}")
        self._now = start
        self._timers: list[tuple[float, int, _Timer]] = []  # heap by deadline, then order
        self._sequence = itertools.count()
        self._changes = 0  # bumped by every new timer and every advance: the autojump's progress
        self._autojump_threshold = autojump_threshold
        self._jumper: asyncio.Task[None] | None = None
        self._settled: asyncio.Event | None = None  # unset while step() waits for the loop

    def now(self) -> float:
        """The virtual time."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], object]) -> _Timer:
        """Run ``callback`` once the virtual time reaches ``when`` (on the next loop iteration
        if it already has)."""
        timer = _Timer(callback)
        self._changes += 1
        if when <= self._now:
            asyncio.get_running_loop().call_soon(timer.run)
        else:
            heapq.heappush(self._timers, (when, next(self._sequence), timer))
            if self._autojump_threshold is not None and self._jumper is None:
                self._jumper = asyncio.get_running_loop().create_task(self._autojump())
        return timer

    @property
    def next_deadline(self) -> float | None:
        """The deadline of the earliest pending timer, or None when none is pending."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, running every timer that falls due on the way."""
        if seconds < 0:
            raise ValueError(f"time cannot go backwards: advance({seconds!r})")
        self._advance_to(self._now + seconds)

    async def step(self, seconds: float = 0.0) -> None:
        """Let every runnable task run as far as it can, ``advance(seconds)``, then again."""
        if seconds < 0:
            raise ValueError(f"time cannot go backwards: step({seconds!r})")
        await self._settle()
        self.advance(seconds)
        await self._settle()

    async def _settle(self) -> None:
        """Yield until no callback is ready in the loop (keeping the autojump out meanwhile)."""
        loop = asyncio.get_running_loop()
        self._settled = settled = asyncio.Event()
        try:
            idle = False
            while not idle:
                await asyncio.sleep(0)
                idle = _loop_idle(loop)
        finally:
            settled.set()
            self._settled = None

    def close(self) -> None:
        """Stop the autojump watcher (time then moves only by hand)."""
        self._autojump_threshold = None
        if self._jumper is not None:
            self._jumper.cancel()
            self._jumper = None

    def __enter__(self) -> FakeClock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _advance_to(self, target: float) -> None:
        self._changes += 1
        while (deadline := self.next_deadline) is not None and deadline <= target:
            _, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, deadline)
            timer.run()
        self._now = max(self._now, target)

    async def _autojump(self) -> None:
        """Jump to the next deadline whenever the loop idled for the threshold; ends when no
        timer is pending (the next ``call_at`` starts it again)."""
        loop = asyncio.get_running_loop()
        _loop_idle(loop)  # fail early on a loop whose ready queue cannot be read
        try:
            while self._autojump_threshold is not None and self.next_deadline is not None:
                if self._settled is not None:
                    await self._settled.wait()  # step() is watching the loop: keep out of it
                    continue
                changes = self._changes
                await asyncio.sleep(self._autojump_threshold)
                deadline = self.next_deadline
                idle = self._settled is None and changes == self._changes and _loop_idle(loop)
                if idle and deadline is not None:
                    self._advance_to(deadline)
        finally:
            if self._jumper is asyncio.current_task():
                self._jumper = None


def _loop_idle(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no callback besides the running one is ready in ``loop`` (asyncio's own loop)."""
    ready = getattr(loop, "_ready", None)
    if ready is None:
        raise RuntimeError(
            f"FakeClock cannot tell whether {type(loop).__name__} is idle; use asyncio's loop"
        )
    return not ready
