"""The watch handler: every event passing the predicates enqueues what its mapper returns,
for an update both for the old and for the new state."""

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from gpuctrl.runtime import Request, freeze, labels_changed
from gpuctrl.runtime._enqueue import WatchHandler


def settings(rv: str, widget: str) -> Mapping[str, Any]:
    """A ConfigMap that configures the Widget named in its ``widget`` label."""
    meta = {"name": "settings", "namespace": "ns", "resourceVersion": rv}
    frozen: Mapping[str, Any] = freeze({"metadata": meta | {"labels": {"widget": widget}}})
    return frozen


def widget_of(obj: Mapping[str, Any]) -> Iterable[Request]:
    return (Request(obj["metadata"]["namespace"], obj["metadata"]["labels"]["widget"]),)


class Queue:
    def __init__(self) -> None:
        self.added: list[Request] = []

    def add(self, key: Request) -> None:
        self.added.append(key)


@pytest.mark.parametrize(
    ("event", "added"),
    [
        ("add", ["w"]),
        ("delete", ["w"]),
        ("update-retarget", ["w", "v"]),
        ("update-same-target", ["w", "w"]),
    ],
    ids=["add", "delete", "update-retarget", "update-same-target"],
)
def test_watch_handler_maps_every_state_of_an_event(event: str, added: list[str]) -> None:
    queue = Queue()
    handler = WatchHandler(queue, widget_of, ())
    old = settings("1", "w")
    if event == "add":
        handler.on_add(old)
    elif event == "delete":
        handler.on_delete(old)
    else:
        handler.on_update(old, settings("2", "v" if event == "update-retarget" else "w"))
    assert queue.added == [Request("ns", name) for name in added]


def test_watch_handler_enqueues_only_events_passing_every_predicate() -> None:
    queue = Queue()
    handler = WatchHandler(queue, widget_of, (labels_changed,))
    handler.on_update(settings("1", "w"), settings("2", "w"))  # labels unchanged: dropped
    assert queue.added == []
    handler.on_update(settings("2", "w"), settings("3", "v"))
    assert queue.added == [Request("ns", "w"), Request("ns", "v")]
