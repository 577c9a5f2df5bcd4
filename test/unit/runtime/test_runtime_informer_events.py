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


async def test_cache_reads_name_the_informer_they_read() -> None:
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        selected = cache.informer(CONFIGMAPS, namespace="ns", label_selector="role=source")
        everything = cache.informer(CONFIGMAPS, namespace="ns")
        with pytest.raises(CacheNotStarted, match="no synced informer for ConfigMap"):
            cache.get(CONFIGMAPS, "a", "ns")
        # "b" lost its label: the selected informer dropped it, the other still has it.
        selected.replace([cm("a", "7", value="new")])
        everything.replace([cm("a", "5", value="old"), cm("b", "6")])
        sel = {"label_selector": "role=source"}
        assert cache.get(CONFIGMAPS, "a", "ns", **sel)["data"] == {"value": "new"}  # type: ignore[index]
        assert cache.get(CONFIGMAPS, "b", "ns", **sel) is None
        assert cache.get(CONFIGMAPS, "a", "ns")["data"] == {"value": "old"}  # type: ignore[index]
        assert cache.get(CONFIGMAPS, "b", "ns") is not None
        assert cache.get(CONFIGMAPS, "c", "ns") is None
        assert [o["metadata"]["name"] for o in cache.list(CONFIGMAPS, "ns", **sel)] == ["a"]
        assert sorted(o["metadata"]["name"] for o in cache.list(CONFIGMAPS, "ns")) == ["a", "b"]
        assert cache.informer(CONFIGMAPS, namespace="ns") is everything
        with pytest.raises(CacheNotStarted, match="role=other"):
            cache.list(CONFIGMAPS, "ns", label_selector="role=other")
        with pytest.raises(CacheNotStarted):
            cache.list(CONFIGMAPS)  # only namespace "ns" is cached


async def test_a_namespaced_get_without_a_namespace_raises() -> None:
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        cache.informer(CONFIGMAPS).replace([cm("a", "1")])
        with pytest.raises(ValueError, match="ConfigMap is namespaced"):
            cache.get(CONFIGMAPS, "a")
        assert cache.get(CONFIGMAPS, "a", "ns") is not None


async def test_cluster_scoped_informers_ignore_the_namespace() -> None:
    nodes = Resource("v1", "Node", "nodes", namespaced=False)
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        informer = cache.informer(nodes, namespace="gpu-operator")
        assert cache.informer(nodes) is informer
        informer.replace([{"metadata": {"name": "n1", "resourceVersion": "1"}}])
        assert cache.get(nodes, "n1") is not None
        assert cache.get(nodes, "n1", "gpu-operator") is not None
        assert len(cache.list(nodes, "gpu-operator")) == 1


async def test_metadata_only_is_an_informer_of_its_own() -> None:
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        full = cache.informer(CONFIGMAPS)
        partial = cache.informer(CONFIGMAPS, metadata_only=True)
        assert partial is not full
        partial.replace([{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}])
        with pytest.raises(CacheNotStarted):
            cache.get(CONFIGMAPS, "a", "ns")
        assert cache.get(CONFIGMAPS, "a", "ns", metadata_only=True) is not None


async def test_indexes_on_the_cache_answer_list() -> None:
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        cache.add_index(CONFIGMAPS, "value", lambda o: [o["data"].get("value", "")])
        cache.informer(CONFIGMAPS).replace([cm("a", "1", value="x"), cm("b", "2", value="y")])
        found = cache.list(CONFIGMAPS, index=("value", "x"))
        assert [o["metadata"]["name"] for o in found] == ["a"]
        assert cache.list(CONFIGMAPS, "other", index=("value", "x")) == []


async def test_another_transform_for_an_existing_informer_is_refused() -> None:
    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api))
        cache.informer(CONFIGMAPS)
        with pytest.raises(ValueError, match="another transform"):
            cache.informer(CONFIGMAPS, transform=lambda o: o)
