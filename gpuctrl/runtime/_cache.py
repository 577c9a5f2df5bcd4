"""The shared cache: one informer per (resource, namespace, selectors, metadata-only) for a
whole process.

Controllers ask the cache for informers; asking twice for the same resource, namespace,
selectors and form returns the same informer, so each is listed and watched once. Reads
(`Cache.get`, `Cache.list`) name the informer they read in the same terms and are answered
from its memory alone: an object that no longer matches a selector is not found through that
selector, whatever other informers hold. A namespace is read from that namespace's informer,
else from the all-namespaces one. Reads are synchronous and return private copies, decoded
from the stored JSON, so a reconciler may change what it read without touching the cache.

Scope: an informer of a cluster-scoped resource is never keyed by a namespace (one asked for
is ignored), and before an informer starts the cache checks its `Resource` against API
discovery: a resource declared namespaced that the server serves cluster-scoped (or the other
way round) is refused with a `ValueError`, since every key built from it would be wrong.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._backoff import Backoff
from ._client import Client
from ._clock import Clock, SystemClock
from ._errors import TRANSIENT_ERRORS, ApiError, CacheNotStarted
from ._informer import Informer, Transform, drop_managed_fields
from ._objects import key
from ._reflector import DEFAULT_READ_TIMEOUT
from ._resources import Resource
from ._store import NAMESPACE_INDEX, IndexFunc

__all__ = ["Cache"]

log = logging.getLogger("gpuctrl.runtime.cache")


@dataclass(frozen=True, slots=True)
class _Key:
    """What names one informer."""

    resource: Resource
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    metadata_only: bool

    def __str__(self) -> str:
        parts = [f"{self.resource.kind} ({self.resource.api_version})"]
        if self.namespace:
            parts.append(f"namespace={self.namespace}")
        if self.label_selector:
            parts.append(f"label_selector={self.label_selector!r}")
        if self.field_selector:
            parts.append(f"field_selector={self.field_selector!r}")
        if self.metadata_only:
            parts.append("metadata_only")
        return " ".join(parts)


class Cache:
    """Shared informers and reads from them.

    ``transforms`` picks a default transform per resource (otherwise `drop_managed_fields`);
    ``resync_period`` is handed to every informer (None: never resync), and so are
    ``read_timeout`` (see `Informer`) and ``clock`` (`SystemClock` unless given), kept as
    `clock` for the controllers built on this cache.
    """

    def __init__(
        self,
        client: Client,
        *,
        transforms: Mapping[Resource, Transform] | None = None,
        resync_period: float | None = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._client = client
        self._transforms = dict(transforms or {})
        self._resync_period = resync_period
        self._read_timeout = read_timeout
        self._informers: dict[_Key, Informer] = {}
        self._verified: set[Resource] = set()
        self._started: tuple[asyncio.TaskGroup, asyncio.Event] | None = None

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        transform: Transform | None = None,
    ) -> Informer:
        """The informer for this resource, namespace, selectors and form, created on first
        request (and started at once when the cache is running).

        ``transform`` (default: the cache's for the resource) runs on every object before it
        is cached; asking for an existing informer with another transform raises ``ValueError``.
        """
        informer_key = _key(resource, namespace, label_selector, field_selector, metadata_only)
        informer = self._informers.get(informer_key)
        if informer is not None:
            if transform is not None and transform is not informer.transform:
                raise ValueError(f"the informer for {informer_key} has another transform")
            return informer
        informer = Informer(
            self._client,
            resource,
            namespace=informer_key.namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            metadata_only=metadata_only,
            transform=transform or self._transforms.get(resource, drop_managed_fields),
            resync_period=self._resync_period,
            read_timeout=self._read_timeout,
            clock=self.clock,
        )
        self._informers[informer_key] = informer
        if self._started is not None:
            tasks, stop = self._started
            tasks.create_task(self._run(informer, stop))
        return informer

    def add_index(
        self,
        resource: Resource,
        name: str,
        func: IndexFunc,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> None:
        """Index the objects of the informer so named (created if needed) by ``func``; read
        with ``list(..., index=(name, value))``. A name is used once per informer."""
        informer = self.informer(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            metadata_only=metadata_only,
        )
        informer.add_index(name, func)

    async def start(self, stop: asyncio.Event) -> None:
        """Check every informer's scope, then run them (also those requested later) until
        ``stop`` is set. Raises ``ValueError`` for a resource whose scope is declared wrong."""
        for resource in {k.resource for k in self._informers}:
            await self._verify(resource, stop)
        async with asyncio.TaskGroup() as tasks:
            self._started = (tasks, stop)
            for informer in self._informers.values():
                tasks.create_task(informer.start(stop))
            await stop.wait()  # with no informer (yet), the group must stay open all the same
        self._started = None

    async def _run(self, informer: Informer, stop: asyncio.Event) -> None:
        await self._verify(informer.resource, stop)
        await informer.start(stop)

    async def _verify(self, resource: Resource, stop: asyncio.Event) -> None:
        """Raise ``ValueError`` when discovery serves ``resource`` with another scope; while it
        serves no such kind (a CRD not installed yet) or cannot be asked, retry until ``stop``
        (the informer does not sync meanwhile)."""
        backoff = Backoff()
        while resource not in self._verified and not stop.is_set():
            try:
                served = await self._client.resource(resource.api_version, resource.kind)
            except (*TRANSIENT_ERRORS, ApiError, ValueError) as error:
                log.warning("cannot look up %s in API discovery yet: %s", resource.kind, error)
                await self.clock.wait(stop, backoff.next_delay())
                continue
            if served.namespaced != resource.namespaced or served.plural != resource.plural:
                raise ValueError(
                    f"{resource} disagrees with the API server, which serves {resource.kind} "
                    f"as {served}: declare it so (or use `await client.resource(api_version, "
                    "kind)`), or every key built from it is wrong"
                )
            self._verified.add(resource)

    async def wait_for_sync(self) -> None:
        """Return once every informer requested so far has stored its first list."""
        await asyncio.gather(*(i.wait_for_sync() for i in self._informers.values()))

    @property
    def has_synced(self) -> bool:
        """Whether every informer requested so far has stored its first list."""
        return all(i.has_synced for i in self._informers.values())

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> dict[str, Any] | None:
        """A private copy of the object as the informer so named holds it, or None when that
        informer does not hold it (deleted, or not matching its selectors).

        Raises ``ValueError`` for a namespaced resource without ``namespace``, and
        `CacheNotStarted` when no such informer has synced.
        """
        if resource.namespaced and not namespace:
            raise ValueError(
                f"{resource.kind} is namespaced: Cache.get({resource.kind}, {name!r}) needs the "
                "namespace"
            )
        informer = self._reader(
            _key(resource, namespace, label_selector, field_selector, metadata_only)
        )
        return informer.store.get(key(resource.scoped(namespace), name))

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        index: tuple[str, str] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Private copies of the objects the informer so named holds, in ``namespace`` if
        given, and under ``index=(name, value)`` if given (see `add_index`)."""
        wanted = _key(resource, namespace, label_selector, field_selector, metadata_only)
        store = self._reader(wanted).store
        namespace = wanted.namespace
        if index is None:
            return store.list() if namespace is None else store.by_index(NAMESPACE_INDEX, namespace)
        found = store.by_index(*index)
        if namespace is None:
            return found
        return [o for o in found if o["metadata"].get("namespace") == namespace]

    def _reader(self, wanted: _Key) -> Informer:
        """The synced informer ``wanted`` names, or the all-namespaces one with its selectors."""
        candidates = [wanted]
        if wanted.namespace is not None:
            candidates.append(_key(wanted.resource, None, *_selectors(wanted)))
        for candidate in candidates:
            informer = self._informers.get(candidate)
            if informer is not None and informer.has_synced:
                return informer
        known = [str(k) for k, i in self._informers.items() if k.resource == wanted.resource]
        raise CacheNotStarted(
            f"no synced informer for {wanted}: watch it from a controller or call "
            "cache.informer(...) and await wait_for_sync() first (reads name the informer: "
            f"same namespace, selectors and form); informers of this kind: {known or 'none'}"
        )


def _key(
    resource: Resource,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    metadata_only: bool,
) -> _Key:
    return _Key(
        resource,
        resource.scoped(namespace),
        label_selector or None,
        field_selector or None,
        metadata_only,
    )


def _selectors(k: _Key) -> tuple[str | None, str | None, bool]:
    return k.label_selector, k.field_selector, k.metadata_only
