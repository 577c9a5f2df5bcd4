"""Polling for asynchronous outcomes in tests (gomega's Eventually)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T] | T], *, within: float = 30.0, interval: float = 0.1
) -> T:
    """Call `check()` (awaiting it if it returns an awaitable) until it passes; return its result.

    It passes when it neither raises AssertionError nor returns ``False``. After `within`
    seconds the last AssertionError is raised (other exceptions at once).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            outcome = check()
            result: T = await outcome if inspect.isawaitable(outcome) else outcome
            assert result is not False, f"{check} was not true within {within} s"
            return result
        except AssertionError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(interval)
