"""Predicates: which informer events may enqueue a reconcile.

A predicate is a function of an `Event` returning whether it passes. A watch with several
predicates lets an event through only when all of them pass.

Every predicate here passes resyncs (an update with ``old is obj``): an informer resyncs only
when a ``resync_period`` was asked for, and then the point is that every object is reconciled
again. Note that `generation_changed` also drops metadata-only writes: a controller that obeys
an annotation (e.g. a pause annotation) or a label must add `annotations_changed` or
`labels_changed` with `any_of`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Event",
    "Predicate",
    "annotations_changed",
    "any_of",
    "generation_changed",
    "labels_changed",
    "resource_version_changed",
]


@dataclass(frozen=True, slots=True)
class Event:
    """One informer event: ``obj`` is the new state (the last state for a delete); ``old`` is
    the previous state for an update (``old is obj`` on a resync), else None."""

    type: Literal["add", "update", "delete"]
    obj: Mapping[str, Any]
    old: Mapping[str, Any] | None = None


Predicate = Callable[[Event], bool]


def _meta(obj: Mapping[str, Any] | None, field: str) -> Any:
    return None if obj is None else obj["metadata"].get(field)


def _passes_unchanged(event: Event) -> bool:
    """Adds, deletes and resyncs: the events every predicate here lets through."""
    return event.type != "update" or event.old is event.obj


def resource_version_changed(event: Event) -> bool:
    """Passes adds, deletes, resyncs and updates that changed the object."""
    return _passes_unchanged(event) or _meta(event.old, "resourceVersion") != _meta(
        event.obj, "resourceVersion"
    )


def generation_changed(event: Event) -> bool:
    """Passes adds, deletes, resyncs and updates that changed ``metadata.generation``: drops
    status-only and metadata-only writes (labels, annotations: see the module docstring).
    Objects without a generation (ConfigMaps, Secrets) pass whenever their resourceVersion
    changed."""
    if _passes_unchanged(event):
        return True
    new_generation = _meta(event.obj, "generation")
    if new_generation is None:
        return resource_version_changed(event)
    return bool(_meta(event.old, "generation") != new_generation)


def labels_changed(event: Event) -> bool:
    """Passes adds, deletes, resyncs and updates that changed ``metadata.labels``."""
    return _passes_unchanged(event) or _meta(event.old, "labels") != _meta(event.obj, "labels")


def annotations_changed(event: Event) -> bool:
    """Passes adds, deletes, resyncs and updates that changed ``metadata.annotations``."""
    return _passes_unchanged(event) or _meta(event.old, "annotations") != _meta(
        event.obj, "annotations"
    )


def any_of(*predicates: Predicate) -> Predicate:
    """A predicate passing when any of ``predicates`` passes (e.g. generation or labels)."""

    def passes(event: Event) -> bool:
        return any(p(event) for p in predicates)

    return passes
