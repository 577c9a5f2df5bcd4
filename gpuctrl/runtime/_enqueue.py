"""From informer events to reconcile requests: mapping functions and the watch handler.

A `Mapper` turns an object into the requests it should trigger: `request_for_object` (the
object itself: the primary type), `requests_for_owner` (the object's controller owner, for
owned types) or any function (e.g. every object that refers to a changed ConfigMap). On an
update both the old and the new state are mapped, so a changed owner reference or label
enqueues both the former and the new target.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from ._predicates import Event, Predicate
from ._reconcile import Request

__all__ = ["Mapper", "WatchHandler", "request_for_object", "requests_for_owner"]

Mapper = Callable[[Mapping[str, Any]], Iterable[Request]]
"""Maps a (frozen) object to the requests it triggers."""


class _Adds(Protocol):
    def add(self, key: Request) -> None: ...


def request_for_object(obj: Mapping[str, Any]) -> Iterable[Request]:
    """The object's own request."""
    meta = obj["metadata"]
    return (Request(meta.get("namespace") or "", meta["name"]),)


def requests_for_owner(api_version: str, kind: str, *, namespaced: bool = True) -> Mapper:
    """A mapper to the object's controller owner (``controller: true``) when that owner has
    ``kind`` in the API group of ``api_version`` (any version of the group matches).

    ``namespaced`` is the owner kind's scope: a namespaced owner shares the object's namespace,
    a cluster-scoped owner's request has none (so one owner always has one key).
    """
    group = api_version.rpartition("/")[0]

    def owner_of(obj: Mapping[str, Any]) -> Iterable[Request]:
        meta = obj["metadata"]
        for ref in meta.get("ownerReferences", ()):
            if (
                ref.get("controller")
                and ref["kind"] == kind
                and ref["apiVersion"].rpartition("/")[0] == group
            ):
                namespace = (meta.get("namespace") or "") if namespaced else ""
                return (Request(namespace, ref["name"]),)
        return ()

    return owner_of


class WatchHandler:
    """An informer event handler that adds the mapped requests of every event passing all
    ``predicates`` to ``queue``."""

    def __init__(self, queue: _Adds, mapper: Mapper, predicates: Sequence[Predicate]) -> None:
        self._queue = queue
        self._mapper = mapper
        self._predicates = tuple(predicates)

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Enqueue for a new object."""
        if not self._predicates:  # every object of a first list comes this way
            for request in self._mapper(obj):
                self._queue.add(request)
            return
        self._handle(Event("add", obj), obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Enqueue for the old and the new state of a changed object."""
        self._handle(Event("update", new, old), old, new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        """Enqueue for a deleted object."""
        self._handle(Event("delete", obj), obj)

    def _handle(self, event: Event, *states: Mapping[str, Any]) -> None:
        if all(p(event) for p in self._predicates):
            for state in states:
                for request in self._mapper(state):
                    self._queue.add(request)
