"""Wiring a controller to the shared cache: the primary type, owned types and mapped watches.

`build_controller` is controller-runtime's builder as one call: ``for_`` is the primary type
(its events enqueue the object itself, filtered by ``predicates``, by default
`generation_changed`: status-only writes and resyncs do not reconcile), ``owns`` are types whose
changes enqueue their controller owner of the primary kind (resyncs dropped), and ``watches``
map any other type's objects to requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from ._cache import Cache
from ._client import Resource
from ._controller import Controller, Reconciler
from ._enqueue import Mapper, request_for_object, requests_for_owner
from ._predicates import Predicate, generation_changed, resource_version_changed

__all__ = ["ControllerOptions", "Watch", "build_controller"]


@dataclass(frozen=True)
class Watch:
    """Reconcile what ``mapper`` returns for every event of ``resource`` passing all
    ``predicates`` (by default: every change, resyncs dropped)."""

    resource: Resource
    mapper: Mapper
    predicates: Sequence[Predicate] = (resource_version_changed,)


class ControllerOptions(TypedDict, total=False):
    """The optional keywords of `build_controller` (defaults there), as
    `Manager.add_controller` passes them on."""

    owns: Iterable[Resource]
    watches: Iterable[Watch]
    namespace: str | None
    label_selector: str | None
    predicates: Sequence[Predicate]
    max_concurrent_reconciles: int


def build_controller(
    cache: Cache,
    name: str,
    reconciler: Reconciler,
    *,
    for_: Resource,
    owns: Iterable[Resource] = (),
    watches: Iterable[Watch] = (),
    namespace: str | None = None,
    label_selector: str | None = None,
    predicates: Sequence[Predicate] = (generation_changed,),
    max_concurrent_reconciles: int = 1,
    drain_timeout: float = 30.0,
) -> Controller:
    """A `Controller` named ``name`` whose watches are registered on ``cache``'s informers;
    it runs on ``cache.clock``.

    ``namespace`` limits every watch to one namespace; ``label_selector`` applies to the
    primary type only.
    """
    controller = Controller(
        name,
        reconciler,
        max_concurrent_reconciles=max_concurrent_reconciles,
        clock=cache.clock,
        drain_timeout=drain_timeout,
    )
    primary = cache.informer(for_, namespace=namespace, label_selector=label_selector)
    controller.watch(primary, request_for_object, predicates)
    to_owner = requests_for_owner(for_.api_version, for_.kind, namespaced=for_.namespaced)
    for owned in owns:
        controller.watch(
            cache.informer(owned, namespace=namespace), to_owner, (resource_version_changed,)
        )
    for watch in watches:
        controller.watch(
            cache.informer(watch.resource, namespace=namespace), watch.mapper, watch.predicates
        )
    return controller
