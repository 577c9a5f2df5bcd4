"""Time as a dependency: every timed thing in gpuctrl.runtime reads and waits through a Clock.

``Clock`` is the abstract interface: ``now()`` (monotonic seconds) and ``call_at()`` (run a
callback at a time on that scale, cancellable) are what an implementation provides; ``sleep``,
``sleep_until``, ``wait`` and ``wait_tasks`` are built on them. ``SystemClock`` is the real
one (the event loop's timers on ``time.monotonic``); ``gpuctrl.testing.FakeClock`` is virtual
time for tests.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Collection
from typing import Protocol, TypeVar

__all__ = ["Clock", "SystemClock", "TimerHandle"]

_T = TypeVar("_T")


class TimerHandle(Protocol):
    """A scheduled callback; ``cancel()`` stops it from running (a no-op once it ran)."""

    def cancel(self) -> None: ...


class Clock(abc.ABC):
    """Monotonic time and timers. Implement ``now`` and ``call_at``; the waits are built on them.

    Timers and waits must be used from inside a running asyncio event loop.
    """

    @abc.abstractmethod
    def now(self) -> float:
        """Monotonic seconds; only differences between two readings mean anything."""

    @abc.abstractmethod
    def call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        """Run ``callback()`` in the event loop once ``now() >= when`` (soon if already past)."""

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` (at least one loop iteration; cancellable)."""
        await self.sleep_until(self.now() + seconds)

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (cancelling the task cuts the wait short)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handle = self.call_at(deadline, lambda: _resolve(future, None))
        try:
            await future
        finally:
            handle.cancel()

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait until ``event`` is set or ``seconds`` passed; return whether it was set."""
        if event.is_set():
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        handle = self.call_at(self.now() + seconds, lambda: _resolve(future, False))
        waiter = loop.create_task(event.wait())
        waiter.add_done_callback(lambda _: _resolve(future, True))
        try:
            return await future
        finally:
            handle.cancel()
            waiter.cancel()

    async def wait_tasks(
        self, tasks: Collection[asyncio.Future[_T]], seconds: float
    ) -> set[asyncio.Future[_T]]:
        """Wait until every one of ``tasks`` is done or ``seconds`` passed (``asyncio.wait``
        with a timeout, on this clock); return those still pending. Cancels none of them."""
        pending = {task for task in tasks if not task.done()}
        if not pending:
            return pending
        all_done = asyncio.Event()

        def on_done(task: asyncio.Future[_T]) -> None:
            pending.discard(task)
            if not pending:
                all_done.set()

        for task in tasks:
            task.add_done_callback(on_done)
        try:
            await self.wait(all_done, seconds)
        finally:
            for task in tasks:
                task.remove_done_callback(on_done)
        return {task for task in tasks if not task.done()}


def _resolve(future: asyncio.Future[_T], value: _T) -> None:
    if not future.done():
        future.set_result(value)


class SystemClock(Clock):
    """The real clock: ``time.monotonic()`` and the running event loop's timers."""

    def now(self) -> float:
        """Seconds of ``time.monotonic()``."""
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        """Schedule ``callback`` on the running loop ``when - now()`` seconds from now."""
        return asyncio.get_running_loop().call_later(max(0.0, when - time.monotonic()), callback)

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)``."""
        await asyncio.sleep(seconds)
