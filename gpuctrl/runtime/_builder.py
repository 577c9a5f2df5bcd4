"""Wiring a controller to the shared cache: the primary type, owned types and mapped watches.

`build_controller` is controller-runtime's builder as one call: ``for_`` is the primary type
(its events enqueue the object itself, filtered by ``predicates``, by default
`generation_changed`: status-only and metadata-only writes do not reconcile), ``owns`` are
types whose changes enqueue their controller owner of the primary kind, and ``watches`` map any
other type's objects to requests. Each `Owns` and `Watch` names its own informer: selectors, a
namespace (default: the controller's) and whether only metadata is cached, so an operator
caches only what it reads; a reconciler reads the same informer back with the same terms.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from ._cache import Cache
from ._controller import Controller, Reconciler
from ._enqueue import Mapper, request_for_object, requests_for_owner
from ._informer import Informer, Transform
from ._predicates import Predicate, generation_changed, resource_version_changed
from ._ratelimiter import RateLimiter
from ._resources import Resource

__all__ = ["ControllerOptions", "Owns", "Watch", "build_controller"]


@dataclass(frozen=True, kw_only=True)
class _Source:
    """The informer a watch reads: ``namespace`` None means the controller's namespace."""

    label_selector: str | None = None
    field_selector: str | None = None
    namespace: str | None = None
    metadata_only: bool = False
    transform: Transform | None = None

    def informer(self, cache: Cache, resource: Resource, namespace: str | None) -> Informer:
        return cache.informer(
            resource,
            namespace=self.namespace or namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            metadata_only=self.metadata_only,
            transform=self.transform,
        )


@dataclass(frozen=True)
class Owns(_Source):
    """Enqueue the controller owner (of the primary kind) of every changed ``resource`` object
    in the informer named by the selectors, ``namespace`` and ``metadata_only``."""

    resource: Resource
    predicates: Sequence[Predicate] = (resource_version_changed,)


@dataclass(frozen=True)
class Watch(_Source):
    """Reconcile what ``mapper`` returns for every event of ``resource`` (in the informer named
    by the selectors, ``namespace`` and ``metadata_only``) passing all ``predicates`` (by
    default: every change)."""

    resource: Resource
    mapper: Mapper
    predicates: Sequence[Predicate] = (resource_version_changed,)


class ControllerOptions(TypedDict, total=False):
    """The optional keywords of `build_controller` (defaults there), as
    `Manager.add_controller` passes them on."""

    owns: Iterable[Resource | Owns]
    watches: Iterable[Watch]
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    metadata_only: bool
    predicates: Sequence[Predicate]
    max_concurrent_reconciles: int
    rate_limiter: RateLimiter | None


def build_controller(
    cache: Cache,
    name: str,
    reconciler: Reconciler,
    *,
    for_: Resource,
    owns: Iterable[Resource | Owns] = (),
    watches: Iterable[Watch] = (),
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    metadata_only: bool = False,
    predicates: Sequence[Predicate] = (generation_changed,),
    max_concurrent_reconciles: int = 1,
    rate_limiter: RateLimiter | None = None,
    drain_timeout: float = 30.0,
) -> Controller:
    """A `Controller` named ``name`` whose watches are registered on ``cache``'s informers;
    it runs on ``cache.clock``.

    ``namespace`` is the default namespace of every watch (cluster-scoped types ignore it);
    ``label_selector``, ``field_selector`` and ``metadata_only`` apply to the primary type only:
    read the primary back with ``cache.get(for_, name, namespace, label_selector=...)``.
    ``rate_limiter`` paces the retries of failed keys (default: `default_controller_rate_limiter`).
    """
    controller = Controller(
        name,
        reconciler,
        max_concurrent_reconciles=max_concurrent_reconciles,
        rate_limiter=rate_limiter,
        clock=cache.clock,
        drain_timeout=drain_timeout,
    )
    primary = cache.informer(
        for_,
        namespace=namespace,
        label_selector=label_selector,
        field_selector=field_selector,
        metadata_only=metadata_only,
    )
    controller.watch(primary, request_for_object, predicates)
    to_owner = requests_for_owner(for_.api_version, for_.kind, namespaced=for_.namespaced)
    for owned in owns:
        spec = owned if isinstance(owned, Owns) else Owns(owned)
        controller.watch(spec.informer(cache, spec.resource, namespace), to_owner, spec.predicates)
    for watch in watches:
        informer = watch.informer(cache, watch.resource, namespace)
        controller.watch(informer, watch.mapper, watch.predicates)
    return controller
