"""The informer's bookkeeping: lists are diffed (relists deliver deletions), watch events are
applied once, objects are transformed, handlers get frozen objects, readers private copies.
The reflector side runs in the integration tests against a real API server."""

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from gpuctrl.runtime import Cache, CacheNotStarted, Client, FrozenDict, Informer, Resource, thaw

CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")


def cm(name: str, rv: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl"}],
        },
        "data": data,
    }


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.objects: list[Mapping[str, Any]] = []

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self.events.append(("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        self.objects.append(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.events.append(("update", new["metadata"]["name"], new["metadata"]["resourceVersion"]))

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        self.events.append(("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))


class Broken:
    def on_add(self, obj: Mapping[str, Any]) -> None:
        raise RuntimeError("handler bug")

    on_update = on_delete = on_add  # type: ignore[assignment]


@pytest.fixture
async def informer() -> AsyncIterator[Informer]:
    async with ApiClient(Configuration()) as api:
        yield Informer(Client(api), CONFIGMAPS)


def sync(informer: Informer, *items: dict[str, Any]) -> Recorder:
    recorder = Recorder()
    informer.add_handler(recorder)
    informer.replace(items)
    return recorder


async def test_first_list_adds_and_syncs(informer: Informer) -> None:
    assert not informer.has_synced
    recorder = sync(informer, cm("a", "1"), cm("b", "2"))
    assert informer.has_synced
    assert sorted(recorder.events) == [("add", "a", "1"), ("add", "b", "2")]


async def test_relist_delivers_only_differences(informer: Informer) -> None:
    recorder = sync(informer, cm("same", "1"), cm("changed", "2"), cm("gone", "3"))
    recorder.events.clear()
    informer.replace([cm("same", "1"), cm("changed", "7"), cm("new", "8")])
    assert sorted(recorder.events) == [
        ("add", "new", "8"),
        ("delete", "gone", "3"),
        ("update", "changed", "7"),
    ]
    assert informer.store.keys() == {"ns/same", "ns/changed", "ns/new"}


async def test_watch_events_apply_once(informer: Informer) -> None:
    recorder = sync(informer)
    informer.apply("ADDED", cm("a", "1"))
    informer.apply("MODIFIED", cm("a", "2"))
    informer.apply("MODIFIED", cm("a", "2"))  # the same version again: not a change
    informer.apply("DELETED", cm("a", "3"))
    informer.apply("DELETED", cm("a", "3"))  # already gone
    assert recorder.events == [("add", "a", "1"), ("update", "a", "2"), ("delete", "a", "3")]


async def test_handlers_get_frozen_objects_and_readers_copies(informer: Informer) -> None:
    recorder = sync(informer, cm("a", "1", key="value"))
    handed = recorder.objects[0]
    assert isinstance(handed, FrozenDict)
    assert "managedFields" not in handed["metadata"]
    with pytest.raises(TypeError, match="read-only"):
        handed["data"]["key"] = "other"  # type: ignore[index]
    read = informer.store.get("ns/a")
    assert read is not None
    assert "managedFields" not in read["metadata"]
    read["data"]["key"] = "other"
    assert informer.store.get("ns/a") == thaw(handed)


async def test_late_handlers_get_the_cached_objects(informer: Informer) -> None:
    sync(informer, cm("a", "1"))
    late = Recorder()
    informer.add_handler(late)
    assert late.events == [("add", "a", "1")]


async def test_a_failing_handler_does_not_stop_the_others(
    informer: Informer, caplog: pytest.LogCaptureFixture
) -> None:
    informer.add_handler(Broken())
    recorder = sync(informer, cm("a", "1"))
    assert recorder.events == [("add", "a", "1")]
    assert "handler bug" in caplog.text


async def test_cache_reads_the_freshest_copy_and_refuses_before_sync() -> None:
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        selected = cache.informer(CONFIGMAPS, namespace="ns", label_selector="role=source")
        everything = cache.informer(CONFIGMAPS, namespace="ns")
        with pytest.raises(CacheNotStarted, match="no synced informer for ConfigMap"):
            cache.get(CONFIGMAPS, "a", "ns")
        selected.replace([cm("a", "7", value="new")])
        everything.replace([cm("a", "5", value="old"), cm("b", "6")])
        assert cache.get(CONFIGMAPS, "a", "ns")["data"] == {"value": "new"}  # type: ignore[index]
        assert cache.get(CONFIGMAPS, "b", "ns") is not None
        assert cache.get(CONFIGMAPS, "c", "ns") is None
        assert sorted(o["metadata"]["name"] for o in cache.list(CONFIGMAPS, "ns")) == ["a", "b"]
        assert cache.informer(CONFIGMAPS, namespace="ns") is everything
