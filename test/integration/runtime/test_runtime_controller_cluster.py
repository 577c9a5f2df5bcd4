"""Controllers against a real API server: convergence, owned objects, retries, predicates."""

import asyncio
import itertools
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from runtime_helpers import CONFIGMAPS, configmap, get_or_none, running

from gpuctrl.runtime import (
    Client,
    Manager,
    Request,
    Resource,
    Result,
    Watch,
    set_controller_reference,
)
from gpuctrl.testing import ControlPlane, eventually

NAMESPACES = Resource("v1", "Namespace", "namespaces", namespaced=False)


async def new_manager(control_plane: ControlPlane) -> Manager:
    return await Manager.create(
        control_plane.kubeconfig,
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
    )


SOURCES = "role=source"


def copier(manager: Manager) -> Any:
    """A reconciler that keeps ``<name>-copy`` (owned by the source) equal to each source.

    It reads the source through the informer that enqueued it (the selected one): the owned
    copies' informer also holds sources, but its watch may lag, and a source it has not seen
    yet would be taken for deleted, with no later event to enqueue it again."""

    async def reconcile(request: Request) -> Result | None:
        source = manager.cache.get(
            CONFIGMAPS, request.name, request.namespace, label_selector=SOURCES
        )
        if source is None:
            return None
        copy = configmap(f"{request.name}-copy", request.namespace, **source.get("data", {}))
        set_controller_reference(source, copy)
        await manager.client.apply(CONFIGMAPS, copy, field_manager="copier", force=True)
        return None

    return reconcile


async def copies_match(client: Client, namespace: str, names: list[str]) -> bool:
    for name in names:
        source = await get_or_none(client, CONFIGMAPS, name, namespace)
        copy = await get_or_none(client, CONFIGMAPS, f"{name}-copy", namespace)
        if copy is None or source is None or copy.get("data") != source.get("data"):
            return False
    return True


async def test_controller_converges_before_and_after_start_and_restores_owned(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    source = {"role": "source"}
    before = [f"before-{i}" for i in range(3)]
    for name in before:
        await client.create(CONFIGMAPS, configmap(name, namespace, source, value=name))
    manager = await new_manager(control_plane)
    manager.add_controller(
        "copier",
        copier(manager),
        for_=CONFIGMAPS,
        owns=[CONFIGMAPS],
        namespace=namespace,
        label_selector=SOURCES,
        max_concurrent_reconciles=2,
    )
    async with running(manager):
        await eventually(lambda: copies_match(client, namespace, before))
        after = [f"after-{i}" for i in range(3)]
        for name in after:
            await client.create(CONFIGMAPS, configmap(name, namespace, source, value=name))
        await eventually(lambda: copies_match(client, namespace, before + after))
        # a change of the source is copied; a change of the owned copy enqueues its owner
        await client.merge_patch(CONFIGMAPS, "before-0", {"data": {"value": "new"}}, namespace)
        await client.merge_patch(CONFIGMAPS, "after-0-copy", {"data": {"value": "bad"}}, namespace)
        await client.delete(CONFIGMAPS, "after-1-copy", namespace)
        await eventually(lambda: copies_match(client, namespace, before + after))
        copy = await client.get(CONFIGMAPS, "before-0-copy", namespace)
        assert copy["data"] == {"value": "new"}
        assert copy["metadata"]["ownerReferences"][0]["name"] == "before-0"


async def test_a_cluster_scoped_owner_has_one_key_for_objects_in_any_namespace(
    control_plane: ControlPlane, client: Client, namespace: str, gizmo_crd: Resource
) -> None:
    name = namespace  # unique in the cluster, as a Gizmo (cluster-scoped) needs
    seen: list[Request] = []

    async def reconcile(request: Request) -> None:
        if request.name == name:
            seen.append(request)

    gizmo = {"apiVersion": gizmo_crd.api_version, "kind": "Gizmo", "metadata": {"name": name}}
    gizmo = await client.create(gizmo_crd, gizmo)
    other = f"{namespace}-b"
    await client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    try:
        manager = await new_manager(control_plane)
        manager.add_controller("gizmos", reconcile, for_=gizmo_crd, owns=[CONFIGMAPS])
        async with running(manager):
            await eventually(lambda: len(seen) == 1)
            for calls, ns in enumerate((namespace, other), start=2):
                part = set_controller_reference(gizmo, configmap("part", ns))
                await client.create(CONFIGMAPS, part)
                await eventually(lambda calls=calls: len(seen) >= calls)
    finally:
        await client.delete(gizmo_crd, name)
        await client.delete(NAMESPACES, other)
    assert set(seen) == {Request("", name)}


async def test_a_mapped_watch_enqueues_what_the_mapper_returns(
    control_plane: ControlPlane, client: Client, namespace: str, widget_crd: Resource
) -> None:
    seen: list[str] = []

    async def reconcile(request: Request) -> None:
        seen.append(request.name)

    def widget_of(obj: Mapping[str, Any]) -> list[Request]:
        """A ConfigMap labelled ``widget=<name>`` configures that Widget."""
        target = obj["metadata"].get("labels", {}).get("widget")
        return [Request(obj["metadata"]["namespace"], target)] if target else []

    widget = {"apiVersion": widget_crd.api_version, "kind": "Widget"}
    await client.create(widget_crd, widget | {"metadata": {"name": "w", "namespace": namespace}})
    manager = await new_manager(control_plane)
    settings = Watch(CONFIGMAPS, widget_of)
    manager.add_controller(
        "configured", reconcile, for_=widget_crd, watches=[settings], namespace=namespace
    )
    async with running(manager):
        await eventually(lambda: seen == ["w"])
        await client.create(CONFIGMAPS, configmap("settings", namespace, {"widget": "w"}))
        await eventually(lambda: seen == ["w", "w"])
        await client.merge_patch(
            CONFIGMAPS, "settings", {"metadata": {"labels": {"widget": "v"}}}, namespace
        )
        await eventually(lambda: sorted(seen[2:]) == ["v", "w"])  # the former and the new target
        await asyncio.sleep(0.3)
        assert len(seen) == 4


async def test_raising_reconciler_is_retried_with_growing_delays(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    calls: list[float] = []

    async def flaky(request: Request) -> None:
        if request.name != "flaky":  # e.g. kube-root-ca.crt
            return
        calls.append(time.monotonic())
        if len(calls) <= 7:
            raise RuntimeError(f"failure {len(calls)}")

    await client.create(CONFIGMAPS, configmap("flaky", namespace))
    manager = await new_manager(control_plane)
    controller = manager.add_controller("flaky", flaky, for_=CONFIGMAPS, namespace=namespace)
    async with running(manager):
        await eventually(lambda: len(calls) >= 8)
        await asyncio.sleep(0.5)
        assert controller.queue.num_requeues(Request(namespace, "flaky")) == 0  # forgotten
    assert len(calls) == 8  # success ends the retries
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    for attempt, gap in enumerate(gaps):
        assert gap >= 0.005 * 2**attempt * 0.95, gaps
    assert gaps[-1] > 8 * gaps[0], gaps


async def test_reconciler_cannot_corrupt_the_cache(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    vandalized: list[str] = []
    refusals: list[str] = []

    async def vandal(request: Request) -> None:
        if request.name != "victim":
            return
        for read in (
            manager.cache.get(CONFIGMAPS, request.name, request.namespace),
            *manager.cache.list(CONFIGMAPS, request.namespace),
        ):
            assert read is not None
            read["data"] = {"key": "evil"}
            read["metadata"]["labels"] = {}
        vandalized.append(request.name)

    class Handler:
        def on_add(self, obj: Mapping[str, Any]) -> None:
            try:
                obj["data"]["key"] = "evil"
            except TypeError as error:
                refusals.append(str(error))

        on_update = on_delete = on_add

    await client.create(CONFIGMAPS, configmap("victim", namespace, {"a": "b"}, key="original"))
    manager = await new_manager(control_plane)
    manager.add_controller("vandal", vandal, for_=CONFIGMAPS, namespace=namespace)
    manager.cache.informer(CONFIGMAPS, namespace=namespace).add_handler(Handler())
    async with running(manager):
        await eventually(lambda: vandalized == ["victim"] and bool(refusals))
        cached = manager.cache.get(CONFIGMAPS, "victim", namespace)
        assert cached is not None
        assert cached["data"] == {"key": "original"}
        assert cached["metadata"]["labels"] == {"a": "b"}
        assert "read-only" in refusals[0]


async def test_status_only_updates_do_not_reconcile(
    control_plane: ControlPlane, client: Client, namespace: str, widget_crd: Resource
) -> None:
    seen: list[int] = []

    async def reconcile(request: Request) -> None:
        widget = manager.cache.get(widget_crd, request.name, request.namespace)
        assert widget is not None
        seen.append(widget["metadata"]["generation"])

    widget = {
        "apiVersion": widget_crd.api_version,
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {"size": 1},
    }
    await client.create(widget_crd, widget)
    manager = await new_manager(control_plane)
    manager.add_controller("widgets", reconcile, for_=widget_crd, namespace=namespace)
    async with running(manager):
        await eventually(lambda: seen == [1])
        current = await client.get(widget_crd, "w", namespace)
        current["status"] = {"ready": True}
        written = await client.replace(widget_crd, current, sub="status")
        assert written["status"] == {"ready": True}
        status = {"apiVersion": widget_crd.api_version, "kind": "Widget"}
        status |= {"metadata": {"name": "w", "namespace": namespace}, "status": {"phase": "x"}}
        await client.apply(widget_crd, status, field_manager="status-writer", sub="status")
        await client.merge_patch(widget_crd, "w", {"metadata": {"labels": {"x": "y"}}}, namespace)
        await eventually(lambda: _labelled(manager, widget_crd, namespace))  # all events seen
        assert seen == [1]
        await client.merge_patch(widget_crd, "w", {"spec": {"size": 2}}, namespace)
        await eventually(lambda: seen == [1, 2])
        await asyncio.sleep(0.3)
        assert seen == [1, 2]


def _labelled(manager: Manager, resource: Resource, namespace: str) -> bool:
    cached = manager.cache.get(resource, "w", namespace)
    return cached is not None and cached["metadata"].get("labels") == {"x": "y"}


async def test_manager_serves_probes_and_metrics(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    async def noop(request: Request) -> None:
        return None

    await client.create(CONFIGMAPS, configmap("probe", namespace))
    manager = await new_manager(control_plane)
    manager.add_controller("probed", noop, for_=CONFIGMAPS, namespace=namespace)
    async with running(manager), aiohttp.ClientSession() as http:
        probes = f"http://127.0.0.1:{manager.health_probe_port}"
        base = f"http://127.0.0.1:{manager.metrics_port}"
        assert manager.metrics_port != manager.health_probe_port
        for path in ("/healthz", "/readyz"):
            async with http.get(probes + path) as response:
                assert response.status == 200, path
        async with http.get(probes + "/metrics") as response:
            assert response.status == 404  # metrics on their own port

        async def reconciled() -> bool:
            async with http.get(base + "/metrics") as response:
                text = await response.text()
            return (
                'controller_runtime_reconcile_total{controller="probed",result="success"}' in text
            )

        await eventually(reconciled)
        async with http.get(base + "/metrics") as response:
            text = await response.text()
        for name in (
            "process_resident_memory_bytes",
            'controller_runtime_max_concurrent_reconciles{controller="probed"} 1.0',
            "controller_runtime_reconcile_time_seconds_bucket",
            'workqueue_adds_total{controller="probed",name="probed"}',
        ):
            assert name in text


async def test_readyz_is_503_until_the_caches_sync(
    control_plane: ControlPlane, namespace: str
) -> None:
    async def noop(request: Request) -> None:
        return None

    unserved = Resource("test.gpuctrl.dev/v1", "Nothing", "nothings")  # lists fail: never syncs
    manager = await new_manager(control_plane)
    manager.add_controller("unsynced", noop, for_=unserved, namespace=namespace)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.start(stop))
    try:
        await eventually(lambda: manager.health_probe_port is not None)
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{manager.health_probe_port}"
            async with http.get(base + "/healthz") as response:
                assert response.status == 200
            async with http.get(base + "/readyz") as response:
                assert response.status == 503
                assert await response.text() == "[-]caches failed\nreadyz failed"
    finally:
        stop.set()
        await task
