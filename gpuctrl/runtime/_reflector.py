"""List-then-watch of one resource, with client-go's recovery rules.

- The first list asks for resourceVersion "0" (served from the API server's watch cache).
- Each watch asks for bookmarks and a server-side timeout drawn from 300-600 s, and carries a
  client-side timeout a little longer, so a half-open connection cannot hang it forever.
- A watch that ends normally is resumed from the last resourceVersion seen, without a relist.
- 410 Gone (an HTTP status or an ERROR event: the resourceVersion was compacted) -> relist from
  the last resourceVersion (served by the watch cache, "not older than"); if that list is also
  Gone, or the watch from the relisted version is Gone again, from "" (a quorum read, paged).
- Connection errors and error statuses -> wait (0.8 s doubling to 30 s, jittered) and
  re-watch from the last resourceVersion, without a relist.

The reflector only moves data; its `ReflectorSink` (the informer) diffs lists against what it
holds, so a relist delivers the deletions that happened while the watch was down.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Iterable, Iterator, Mapping
from contextlib import aclosing
from typing import Any, Protocol

import aiohttp

from ._backoff import Backoff
from ._client import Client, Resource
from ._clock import Clock, SystemClock
from ._errors import ApiError, Gone
from ._listjson import read_list

__all__ = ["Reflector", "ReflectorSink"]

log = logging.getLogger("gpuctrl.runtime.reflector")

_RETRYABLE = (aiohttp.ClientError, OSError, TimeoutError, ApiError, ValueError)


class ReflectorSink(Protocol):
    """Receives what a reflector reads."""

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        """The complete current set of objects (after a list), decoded while iterated."""

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""


class Reflector:
    """Keeps a `ReflectorSink` in step with one resource (optionally one namespace and
    selectors) until cancelled; backoff pauses are waited on ``clock`` (`SystemClock` unless
    given)."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        sink: ReflectorSink,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._resource = resource
        self._sink = sink
        self._path = resource.path(namespace)
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        self.resource_version = ""  # the last resourceVersion delivered to the sink
        self.lists = 0  # how many lists were delivered (1 + relists)
        self._quorum_next = False  # the last list's version was already expired: read from etcd

    async def run(self) -> None:
        """List and watch forever; returns only by cancellation."""
        backoff = Backoff()
        while True:
            try:
                await self._list()
            except (Gone, *_RETRYABLE) as error:
                await self._pause("list", error, backoff)
                continue
            backoff.reset()
            await self._watch_until_gone(backoff)

    async def _list(self) -> None:
        version = "" if self._quorum_next else self.resource_version if self.lists else "0"
        try:
            items, rv = await self._list_at(version)
        except Gone:
            log.info("relisting %s from a quorum read: resourceVersion expired", self._path)
            items, rv = await self._list_at("")
        self._sink.replace(items)
        self.resource_version = rv
        self.lists += 1
        self._quorum_next = False

    async def _list_at(self, resource_version: str) -> tuple[Iterable[dict[str, Any]], str]:
        """The items (decoded lazily, page by page) and resourceVersion of one list."""
        # With a resourceVersion the watch cache answers in one piece (a limit would send the
        # request to etcd for an exact, possibly stale, read); without one, etcd answers in pages.
        if resource_version:
            query: dict[str, str | int | bool] = {
                **self._selectors,
                "resourceVersion": resource_version,
            }
        else:
            query = {**self._selectors, "limit": 500}
        pages: list[Iterator[dict[str, Any]]] = []
        while True:
            meta, items = read_list((await self._client.read(self._path, query)).decode())
            pages.append(items)
            if not meta.get("continue"):
                return _with_type(itertools.chain(*pages), self._resource), meta["resourceVersion"]
            query = {**self._selectors, "limit": 500, "continue": meta["continue"]}

    async def _watch_until_gone(self, backoff: Backoff) -> None:
        listed_at = self.resource_version
        while True:
            try:
                await self._watch()
                backoff.reset()
            except Gone as error:
                log.info("relisting %s: %s", self._path, error)
                self._quorum_next = self.resource_version == listed_at
                return
            except _RETRYABLE as error:
                await self._pause("watch", error, backoff)

    async def _watch(self) -> None:
        server_timeout = random.randint(300, 600)
        query: dict[str, str | int | bool] = {
            **self._selectors,
            "allowWatchBookmarks": True,
            "resourceVersion": self.resource_version,
            "timeoutSeconds": server_timeout,
        }
        limits = aiohttp.ClientTimeout(total=server_timeout + 30, sock_connect=10)
        async with aclosing(self._client.watch(self._path, query, limits)) as events:
            async for event in events:
                self._handle(event)

    def _handle(self, event: Mapping[str, Any]) -> None:
        event_type, obj = event["type"], event["object"]
        if event_type != "BOOKMARK":
            obj.setdefault("apiVersion", self._resource.api_version)
            obj.setdefault("kind", self._resource.kind)
            self._sink.apply(event_type, obj)
        self.resource_version = obj["metadata"]["resourceVersion"]

    async def _pause(self, what: str, error: BaseException, backoff: Backoff) -> None:
        delay = backoff.next_delay()
        log.warning("%s %s failed (%r); retrying in %.1f s", what, self._path, error, delay)
        await self._clock.sleep(delay)


def _with_type(items: Iterable[dict[str, Any]], resource: Resource) -> Iterator[dict[str, Any]]:
    """Fill in apiVersion and kind, which list responses leave out of their items."""
    for item in items:
        item.setdefault("apiVersion", resource.api_version)
        item.setdefault("kind", resource.kind)
        yield item
