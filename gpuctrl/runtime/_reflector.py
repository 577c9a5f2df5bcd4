"""List-then-watch of one resource, with client-go's recovery rules.

- The first list asks for resourceVersion "0" (served from the API server's watch cache).
- Each watch asks for bookmarks and a server-side timeout drawn from 300-600 s. A watch that
  ends normally is resumed from the last resourceVersion seen, without a relist; one that the
  server ends within a second having delivered nothing counts as a failure (backed off), so a
  server that closes watches at once cannot make the reflector hot-loop.
- A dead stream (a half-open connection, a proxy that stopped forwarding) is noticed by a read
  timeout: ``read_timeout`` seconds with not one byte (the API server sends a bookmark or an
  event well within a minute on a healthy watch) end the watch, which is resumed at once. That
  is also how a watch of a quiet resource ends, so it is a normal end, like the server's own
  timeout: the backoff is reset and nothing is logged above debug (if the connection is dead,
  the next watch fails to open, and that backs off).
- 410 Gone (an HTTP status or an ERROR event: the resourceVersion was compacted) -> relist from
  the last resourceVersion (served by the watch cache, "not older than"); if that list is also
  Gone, or the watch from the relisted version is Gone again, from "" (a quorum read, paged).
- Connection errors and error statuses -> wait (0.8 s doubling to 30 s, jittered) and
  re-watch from the last resourceVersion, without a relist.

The reflector only moves data; its `ReflectorSink` (the informer) diffs lists against what it
holds, so a relist delivers the deletions that happened while the watch was down. A list is
handed over in batches decoded while its body arrives (see `_listjson`), so the sink stores
and dispatches objects while the server still sends the rest.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from contextlib import aclosing
from typing import Any, Protocol

import aiohttp
from prometheus_client import Counter

from ._backoff import Backoff
from ._client import METADATA_ONLY, Client, typed
from ._clock import Clock, SystemClock
from ._errors import TRANSIENT_ERRORS, ApiError, Gone
from ._jitter import jittered
from ._metrics import METRICS_REGISTRY
from ._resources import Resource

__all__ = ["DEFAULT_READ_TIMEOUT", "Reflector", "ReflectorSink"]

log = logging.getLogger("gpuctrl.runtime.reflector")

DEFAULT_READ_TIMEOUT = 75.0
"""Seconds a watch may stay silent before it is taken for dead (a little over the minute within
which a healthy watch delivers a bookmark or an event)."""

_WATCHES = Counter(
    "gpuctrl_reflector_watches",
    "Watch requests a reflector opened.",
    ["resource"],
    registry=METRICS_REGISTRY,
)
_RETRYABLE = (*TRANSIENT_ERRORS, ApiError, ValueError)  # ValueError: a garbled response
_MIN_WATCH = 1.0  # seconds: a watch ended sooner with no event is treated as a failure


class ReflectorSink(Protocol):
    """Receives what a reflector reads."""

    async def replace_streamed(self, batches: AsyncIterable[Iterable[dict[str, Any]]]) -> None:
        """The complete current set of objects (a list), in batches as they arrive; an error
        raised by the iteration ends the list (what came before it may have been applied)."""

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""


class EmptyWatch(Exception):
    """The server ended a watch at once without delivering anything."""


class Reflector:
    """Keeps a `ReflectorSink` in step with one resource (optionally one namespace and
    selectors, optionally metadata only) until cancelled; backoff pauses are waited on
    ``clock`` (`SystemClock` unless given)."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        sink: ReflectorSink,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._resource = resource
        self._sink = sink
        self._path = resource.path(namespace)
        self._metadata_only = metadata_only
        self._read_timeout = read_timeout
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        self.resource_version = ""  # the last resourceVersion delivered to the sink
        self.lists = 0  # how many lists were delivered (1 + relists)
        self._watches = _WATCHES.labels(resource=f"{resource.plural}.{resource.api_version}")
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
            rv = await self._list_at(version)
        except Gone:
            log.info("relisting %s from a quorum read: resourceVersion expired", self._path)
            rv = await self._list_at("")
        self.resource_version = rv
        self.lists += 1
        self._quorum_next = False

    async def _list_at(self, resource_version: str) -> str:
        """Stream one list into the sink; return its resourceVersion."""
        # With a resourceVersion the watch cache answers in one piece (a limit would send the
        # request to etcd for an exact, possibly stale, read); without one, etcd answers in pages.
        query: dict[str, str | int | bool] = dict(self._selectors)
        if resource_version:
            query["resourceVersion"] = resource_version
        else:
            query["limit"] = 500
        accept = METADATA_ONLY if self._metadata_only else "application/json"
        version = ""

        async def batches() -> AsyncIterator[Iterator[dict[str, Any]]]:
            nonlocal version
            listing = self._client.list_batches(self._path, query, accept=accept)
            async for page_meta, batch in listing:
                yield typed(batch, self._resource)
                # Known once the page's head was read: not after a first chunk shorter than it.
                version = page_meta.get("resourceVersion", version)

        await self._sink.replace_streamed(batches())
        if not version:
            raise ValueError(f"the list of {self._path} has no metadata.resourceVersion")
        return version

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
            except (EmptyWatch, *_RETRYABLE) as error:
                await self._pause("watch", error, backoff)

    async def _watch(self) -> None:
        server_timeout = round(jittered(300, 1.0))
        query: dict[str, str | int | bool] = {
            **self._selectors,
            "allowWatchBookmarks": True,
            "resourceVersion": self.resource_version,
            "timeoutSeconds": server_timeout,
        }
        limits = aiohttp.ClientTimeout(
            total=server_timeout + 30, sock_connect=10, sock_read=self._read_timeout
        )
        opened, delivered = self._clock.now(), False
        self._watches.inc()
        watching = self._client.watch(self._path, query, limits, metadata_only=self._metadata_only)
        async with aclosing(watching) as events:
            try:
                async for event in events:
                    delivered = True
                    self._handle(event)
            except aiohttp.SocketTimeoutError:  # sock_read: quiet, not failed (module docstring)
                log.debug(
                    "watch %s silent for %s s; watching again", self._path, self._read_timeout
                )
                return
        if not delivered and self._clock.now() - opened < _MIN_WATCH:
            raise EmptyWatch(f"the server ended a watch of {self._path} at once, with no event")

    def _handle(self, event: Mapping[str, Any]) -> None:
        event_type, obj = event["type"], event["object"]
        if event_type != "BOOKMARK":
            obj["apiVersion"] = self._resource.api_version
            obj["kind"] = self._resource.kind
            self._sink.apply(event_type, obj)
        self.resource_version = obj["metadata"]["resourceVersion"]

    async def _pause(self, what: str, error: BaseException, backoff: Backoff) -> None:
        delay = backoff.next_delay()
        log.warning("%s %s failed (%r); retrying in %.1f s", what, self._path, error, delay)
        await self._clock.sleep(delay)
