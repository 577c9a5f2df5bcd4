"""A shared informer: one reflector feeding one indexed store and any number of handlers.

Every object is transformed (by default: ``metadata.managedFields`` dropped) before it is
stored (as compact JSON, see `_store`). Handlers get frozen objects (read-only, shared by all
handlers of one event, see `_objects`); readers of the store get private copies.
A list is diffed against the store: new keys are delivered as adds, changed resourceVersions
as updates, keys missing from the list as deletes (what vanished while the watch was down);
unchanged objects are not delivered again. Objects are stored and delivered while the list
arrives, batch by batch; the deletes (and `Informer.has_synced`) wait for its end, so a list
that fails midway leaves the objects it did deliver and is retried whole. Handlers run on the
event loop, in registration order; a handler that raises does not stop the others, and its
event is not lost: while the informer runs, the object is delivered to that handler again as a
resync (``old is new``, or the same delete if it is gone) after a backoff (0.8 s doubling to
30 s), until the handler takes it. A handler's first failure is logged with its traceback,
later ones in one line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import Counter

from ._backoff import Backoff
from ._client import Client
from ._clock import Clock, SystemClock
from ._jitter import jittered
from ._metrics import METRICS_REGISTRY
from ._objects import freeze, object_key
from ._reflector import DEFAULT_READ_TIMEOUT, Reflector
from ._resources import Resource
from ._store import IndexFunc, Store

__all__ = ["EventHandler", "Informer", "Transform", "drop_managed_fields"]

log = logging.getLogger("gpuctrl.runtime.informer")

_LISTS = Counter(
    "gpuctrl_informer_lists_total",
    "Complete lists an informer stored (the first one and every relist).",
    ["resource"],
    registry=METRICS_REGISTRY,
)

Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""Rewrites a freshly decoded object before it is cached (may mutate and return it)."""


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default transform: drop ``metadata.managedFields`` (often a third of an object)."""
    obj["metadata"].pop("managedFields", None)
    return obj


class EventHandler(Protocol):
    """What an informer calls on changes; each method gets frozen (read-only) objects."""

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """An object appeared (also: every cached object when the handler is added)."""

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """An object changed; on a resync ``old is new``."""

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        """An object was deleted (its last known state)."""


class Informer:
    """Lists and watches one resource (in one namespace, with selectors) into a `Store`.

    Start it with `start`; `wait_for_sync` returns once the first list is in the store.
    ``metadata_only`` caches PartialObjectMetadata (apiVersion, kind and metadata: a fraction
    of a Node's bytes); ``read_timeout`` is how long a silent watch is trusted (see `_reflector`).
    ``resync_period`` (seconds, jittered up to +10 %) re-delivers every cached object as an
    update with ``old is new``; None (the default) never resyncs. Resyncs and the reflector's
    backoff pauses wait on ``clock`` (`SystemClock` unless given).
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        transform: Transform = drop_managed_fields,
        resync_period: float | None = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        self.resource = resource
        self.transform = transform
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.store = Store()
        self._resync_period = resync_period
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self._running = False
        self._failed: set[int] = set()  # ids of handlers that failed once (traceback logged)
        self._retries: dict[tuple[int, str], tuple[Backoff, asyncio.Task[None]]] = {}
        self._reflector = Reflector(
            client,
            resource,
            self,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            metadata_only=metadata_only,
            read_timeout=read_timeout,
            clock=self._clock,
        )
        self._lists = _LISTS.labels(resource=f"{resource.plural}.{resource.api_version}")

    @property
    def has_synced(self) -> bool:
        """Whether the first list has been stored."""
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        """Return once the first list is in the store."""
        await self._synced.wait()

    def add_handler(self, handler: EventHandler) -> None:
        """Subscribe ``handler`` to changes; objects already cached are delivered as adds."""
        self._handlers.append(handler)
        for obj in self.store.list():
            self._call(handler, "on_add", freeze(obj))

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Add a named index to the store (see `Store.add_index`)."""
        self.store.add_index(name, func)

    async def start(self, stop: asyncio.Event) -> None:
        """List and watch until ``stop`` is set."""
        self._running = True
        try:
            async with asyncio.TaskGroup() as tasks:
                reflecting = tasks.create_task(self._reflector.run())
                resyncing = tasks.create_task(self._resync_forever())
                await stop.wait()
                reflecting.cancel()
                resyncing.cancel()
        finally:
            self._running = False
            for _, retry in self._retries.values():
                retry.cancel()
            self._retries.clear()

    def replace(self, items: Iterable[dict[str, Any]]) -> None:
        """Make the store hold exactly ``items``, delivering the differences (as a list does)."""
        self._listed({self._upsert(raw) for raw in items})

    async def replace_streamed(self, batches: AsyncIterable[Iterable[dict[str, Any]]]) -> None:
        """Reflector sink: `replace` with the items of ``batches``, each batch stored and
        delivered as it arrives (see the module docstring)."""
        seen: set[str] = set()
        upsert, add = self._upsert, seen.add
        async for batch in batches:
            for raw in batch:  # one item at a time: each one's dicts are freed before the next
                add(upsert(raw))
        self._listed(seen)

    def _listed(self, seen: set[str]) -> None:
        """A list ended holding the keys ``seen``: delete the others; synced."""
        for key in self.store.keys() - seen:
            self._delete(key, None)
        self._lists.inc()
        self._synced.set()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """Reflector sink: one watch event."""
        if event_type == "DELETED":
            self._delete(object_key(obj), obj)
        else:
            self._upsert(obj)

    def _upsert(self, raw: dict[str, Any]) -> str:
        key = object_key(raw)
        stored_rv = self.store.resource_version(key)
        if stored_rv is not None and stored_rv == raw["metadata"].get("resourceVersion"):
            return key
        obj = self.transform(raw)
        old = self.store.get(key) if self._handlers and stored_rv is not None else None
        self.store.upsert_as(key, obj)
        if self._handlers:
            if old is None:
                self._dispatch("on_add", freeze(obj))
            else:
                self._dispatch("on_update", freeze(old), freeze(obj))
        return key

    def _delete(self, key: str, final_state: dict[str, Any] | None) -> None:
        """Forget ``key``; handlers get its ``final_state`` (from a watch) or the last stored."""
        last: dict[str, Any] | None
        if final_state is not None:
            last = self.transform(final_state)
        else:
            last = self.store.get(key) if self._handlers else None
        if self.store.delete(key) and self._handlers and last is not None:
            self._dispatch("on_delete", freeze(last))

    def _dispatch(self, method: str, *objs: Mapping[str, Any]) -> None:
        for handler in self._handlers:
            self._call(handler, method, *objs)

    def _call(self, handler: EventHandler, method: str, *objs: Mapping[str, Any]) -> bool:
        """Deliver one event to one handler; a failure is logged and retried (module doc)."""
        try:
            getattr(handler, method)(*objs)
        except Exception as error:
            key = object_key(objs[-1])  # only on failure: this is every event's path
            if id(handler) in self._failed:
                log.warning("event handler %r failed again on %s: %r", handler, key, error)
            else:
                self._failed.add(id(handler))
                log.exception("event handler %r failed on %s; retrying", handler, key)
            self._retry(handler, key, objs[-1] if method == "on_delete" else None)
            return False
        return True

    def _retry(self, handler: EventHandler, key: str, deleted: Mapping[str, Any] | None) -> None:
        if not self._running:
            return
        slot = (id(handler), key)
        backoff = Backoff()
        if slot in self._retries:  # one redelivery pending per handler and object
            backoff, pending = self._retries[slot]
            if pending is not asyncio.current_task():
                pending.cancel()
        task = asyncio.get_running_loop().create_task(
            self._redeliver(handler, key, deleted, backoff.next_delay())
        )
        self._retries[slot] = (backoff, task)

    async def _redeliver(
        self,
        handler: EventHandler,
        key: str,
        deleted: Mapping[str, Any] | None,
        delay: float,
    ) -> None:
        await self._clock.sleep(delay)
        slot = (id(handler), key)
        current = self.store.get(key)
        if current is not None:
            frozen = freeze(current)
            taken = self._call(handler, "on_update", frozen, frozen)
        elif deleted is not None:
            taken = self._call(handler, "on_delete", deleted)
        else:
            taken = True  # gone, and the failed event was not its delete: nothing to deliver
        if taken:
            self._retries.pop(slot, None)

    async def _resync_forever(self) -> None:
        if self._resync_period is None:
            return
        await self._synced.wait()
        while True:
            await self._clock.sleep(jittered(self._resync_period))
            for obj in self.store.list():
                frozen = freeze(obj)
                self._dispatch("on_update", frozen, frozen)
