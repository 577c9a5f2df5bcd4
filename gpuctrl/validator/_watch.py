"""One watch request, as raw events (the agent's only streaming I/O).

kubernetes_asyncio's ``Watch`` deserializes every event into models through an extra
ApiClient of its own; the agent wants the Pods as the API sends them (camelCase dicts) and a
client-side timeout, so it reads the stream itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = ["WatchExpired", "watch_events"]

# How much longer than the server-side timeout the client waits for a watch to end by itself.
_CLIENT_GRACE_SECONDS = 15


class WatchExpired(Exception):
    """The resourceVersion the watch started from is too old (410 Gone): list or get again."""


async def watch_events(
    list_call: Callable[..., Awaitable[Any]],
    *args: Any,
    resource_version: str,
    timeout_seconds: int,
    **kwargs: Any,
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """Yield ``(type, object)`` for each event of one watch from ``resource_version``.

    Ends when the server ends the watch (after about ``timeout_seconds``); raises
    `WatchExpired` on 410 Gone, `ApiException` on other API errors, and aiohttp's errors
    (including its timeout, ``timeout_seconds`` plus a grace) when the connection fails.
    Close it with ``contextlib.aclosing`` when leaving early.
    """
    response = await list_call(
        *args,
        watch=True,
        resource_version=resource_version,
        timeout_seconds=timeout_seconds,
        allow_watch_bookmarks=True,
        _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(total=timeout_seconds + _CLIENT_GRACE_SECONDS),
        **kwargs,
    )
    try:
        if response.status == 410:
            raise WatchExpired(await response.text())
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=await response.text())
        async for line in response.content:
            if not line.strip():
                continue
            event = json.loads(line)
            if event["type"] == "ERROR":
                _raise_status(event["object"])
            yield event["type"], event["object"]
    finally:
        response.release()


def _raise_status(status: dict[str, Any]) -> None:
    message = f"{status.get('reason')}: {status.get('message')}"
    if status.get("code") == 410:
        raise WatchExpired(message)
    raise ApiException(status=status.get("code"), reason=message)
