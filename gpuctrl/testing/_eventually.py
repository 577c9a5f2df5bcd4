"""Polling for asynchronous outcomes in tests (gomega's Eventually)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], *, within: float = 30.0, interval: float = 0.1
) -> T:
    """Await `check()` until it returns without raising AssertionError, and return its result.

    After `within` seconds the last AssertionError is raised (other exceptions at once).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            return await check()
        except AssertionError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(interval)
