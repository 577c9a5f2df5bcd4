"""The shared cache: one informer per (resource, namespace, selectors) for a whole process.

Controllers ask the cache for informers; asking twice for the same resource, namespace and
selectors returns the same informer, so each is listed and watched once. Reads (`Cache.get`,
`Cache.list`) are synchronous and answered from memory; each returns private copies, decoded
from the stored JSON, so a reconciler may change what it read without touching the cache.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Mapping
from typing import Any

from ._client import Client, Resource
from ._clock import Clock, SystemClock
from ._errors import CacheNotStarted
from ._informer import Informer, Transform, drop_managed_fields
from ._store import NAMESPACE_INDEX

__all__ = ["Cache"]

_InformerKey = tuple[Resource, str | None, str | None, str | None]


class Cache:
    """Shared informers and reads from them.

    ``transforms`` picks a transform per resource (default: `drop_managed_fields`);
    ``resync_period`` is handed to every informer (None: never resync); so is ``clock``
    (`SystemClock` unless given), kept as `clock` for the controllers built on this cache.
    """

    def __init__(
        self,
        client: Client,
        *,
        transforms: Mapping[Resource, Transform] | None = None,
        resync_period: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._client = client
        self._transforms = dict(transforms or {})
        self._resync_period = resync_period
        self._informers: dict[_InformerKey, Informer] = {}
        self._started: tuple[asyncio.TaskGroup, asyncio.Event] | None = None

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The informer for this resource, namespace and selectors, created on first request
        (and started at once when the cache is running)."""
        key = (resource, namespace, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self._client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=self._transforms.get(resource, drop_managed_fields),
                resync_period=self._resync_period,
                clock=self.clock,
            )
            self._informers[key] = informer
            if self._started is not None:
                tasks, stop = self._started
                tasks.create_task(informer.start(stop))
        return informer

    async def start(self, stop: asyncio.Event) -> None:
        """Run every informer (also those requested later) until ``stop`` is set."""
        async with asyncio.TaskGroup() as tasks:
            self._started = (tasks, stop)
            for informer in self._informers.values():
                tasks.create_task(informer.start(stop))
            await stop.wait()  # with no informer (yet), the group must stay open all the same
        self._started = None

    async def wait_for_sync(self) -> None:
        """Return once every informer requested so far has stored its first list."""
        await asyncio.gather(*(i.wait_for_sync() for i in self._informers.values()))

    @property
    def has_synced(self) -> bool:
        """Whether every informer requested so far has stored its first list."""
        return all(i.has_synced for i in self._informers.values())

    def get(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A private copy of the cached object, or None when it is not in the cache.

        When several informers hold the object (e.g. one with a label selector for a
        controller's primary type and one without for owned objects), the freshest copy (the
        highest resourceVersion) wins, so a reconcile never reads older state than the event
        that triggered it.
        """
        key = f"{namespace}/{name}" if resource.namespaced and namespace else name
        freshest: tuple[int, Informer] | None = None
        for informer in self._holders(resource, namespace):
            version = informer.store.resource_version(key)
            if version is not None and (freshest is None or _order(version) > freshest[0]):
                freshest = (_order(version), informer)
        return None if freshest is None else freshest[1].store.get(key)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        index: tuple[str, str] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Private copies of the cached objects of ``resource``, in ``namespace`` if given,
        and under ``index=(name, value)`` if given."""
        store = self._reader(resource, namespace).store
        if index is None:
            if namespace is None or not resource.namespaced:
                return store.list()
            return store.by_index(NAMESPACE_INDEX, namespace)
        found = store.by_index(*index)
        if namespace is None:
            return found
        return [o for o in found if o["metadata"].get("namespace") == namespace]

    def _reader(self, resource: Resource, namespace: str | None) -> Informer:
        """A synced informer without selectors that holds ``namespace``'s objects."""
        for key in ((resource, None, None, None), (resource, namespace, None, None)):
            informer = self._informers.get(key)
            if informer is not None and informer.has_synced:
                return informer
        raise self._not_started(resource, namespace)

    def _holders(self, resource: Resource, namespace: str | None) -> builtins.list[Informer]:
        """The synced informers (any selectors) that may hold objects of ``namespace``."""
        holders = [
            informer
            for (kind, where, _, _), informer in self._informers.items()
            if kind == resource and where in (None, namespace) and informer.has_synced
        ]
        if not holders:
            raise self._not_started(resource, namespace)
        return holders

    def _not_started(self, resource: Resource, namespace: str | None) -> CacheNotStarted:
        where = f" in namespace {namespace!r}" if namespace else ""
        return CacheNotStarted(
            f"no synced informer for {resource.kind} ({resource.api_version}){where}: watch it "
            "from a controller or call cache.informer(...) and await wait_for_sync() first"
        )


def _order(resource_version: str) -> int:
    """resourceVersions are opaque, but etcd's are increasing integers: compare them so."""
    return int(resource_version) if resource_version.isdigit() else 0
