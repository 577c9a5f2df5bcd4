"""Predicates decide which informer events enqueue a reconcile."""

from typing import Any

import pytest

from gpuctrl.runtime import (
    Event,
    Predicate,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
    resource_version_changed,
)


def obj(rv: str, generation: int | None = 1, labels: Any = None, annotations: Any = None) -> Any:
    meta: dict[str, Any] = {"name": "a", "resourceVersion": rv}
    if generation is not None:
        meta["generation"] = generation
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta}


BASE = obj("1")
RESYNC = Event("update", BASE, BASE)
STATUS_ONLY = Event("update", obj("2"), BASE)
SPEC_CHANGE = Event("update", obj("2", generation=2), BASE)
LABELS = Event("update", obj("2", labels={"a": "b"}), BASE)
ANNOTATIONS = Event("update", obj("2", annotations={"a": "b"}), BASE)
NO_GEN_CHANGE = Event("update", obj("2", generation=None), obj("1", generation=None))
NO_GEN_RESYNC = Event("update", obj("1", generation=None), obj("1", generation=None))
ADD = Event("add", BASE)
DELETE = Event("delete", BASE)

CASES = [
    # predicate, event, passes
    (generation_changed, ADD, True),
    (generation_changed, DELETE, True),
    (generation_changed, RESYNC, True),
    (generation_changed, STATUS_ONLY, False),
    (generation_changed, LABELS, False),
    (generation_changed, SPEC_CHANGE, True),
    (generation_changed, NO_GEN_CHANGE, True),
    (generation_changed, NO_GEN_RESYNC, False),
    (resource_version_changed, RESYNC, True),
    (resource_version_changed, STATUS_ONLY, True),
    (resource_version_changed, ADD, True),
    (labels_changed, LABELS, True),
    (labels_changed, STATUS_ONLY, False),
    (labels_changed, DELETE, True),
    (annotations_changed, ANNOTATIONS, True),
    (annotations_changed, LABELS, False),
    (any_of(generation_changed, labels_changed), LABELS, True),
    (any_of(generation_changed, labels_changed), SPEC_CHANGE, True),
    (any_of(generation_changed, labels_changed), STATUS_ONLY, False),
]
IDS = [
    "gen-add",
    "gen-delete",
    "gen-resync",
    "gen-status-only",
    "gen-labels",
    "gen-spec",
    "gen-none-changed",
    "gen-none-resync",
    "rv-resync",
    "rv-status",
    "rv-add",
    "labels-labels",
    "labels-status",
    "labels-delete",
    "annotations-annotations",
    "annotations-labels",
    "any-labels",
    "any-spec",
    "any-status",
]


@pytest.mark.parametrize(("predicate", "event", "passes"), CASES, ids=IDS)
def test_predicate(predicate: Predicate, event: Event, passes: bool) -> None:
    assert predicate(event) is passes
