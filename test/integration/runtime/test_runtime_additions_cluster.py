"""What controllers and webhooks need from gpuctrl.runtime, against a real API server: typed
list items, metadata-only reads, guarded deletes, status writes only on change, scope checked
against discovery, custom probes, client metrics."""

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from runtime_helpers import CONFIGMAPS, configmap, running

from gpuctrl.runtime import (
    EVENTS,
    METRICS_REGISTRY,
    Client,
    Conflict,
    Informer,
    Invalid,
    LeaderElection,
    Manager,
    Request,
    Resource,
    StatusWriter,
)
from gpuctrl.testing import ControlPlane, eventually


async def test_list_items_carry_api_version_and_kind(client: Client, namespace: str) -> None:
    await client.create(CONFIGMAPS, configmap("typed", namespace))
    selector = "metadata.name=typed"
    [item] = await client.list(CONFIGMAPS, namespace, field_selector=selector)
    assert (item["apiVersion"], item["kind"]) == ("v1", "ConfigMap")
    [partial] = await client.list(
        CONFIGMAPS, namespace, field_selector=selector, metadata_only=True
    )
    assert (partial["apiVersion"], partial["kind"]) == ("v1", "ConfigMap")
    assert "data" not in partial
    assert partial["metadata"]["name"] == "typed"


async def test_delete_with_a_uid_precondition_spares_a_recreated_object(
    client: Client, namespace: str
) -> None:
    old = await client.create(CONFIGMAPS, configmap("twice", namespace))
    await client.delete(CONFIGMAPS, "twice", namespace, propagation_policy="Foreground")
    await eventually(lambda: _absent(client, namespace, "twice"))
    await client.create(CONFIGMAPS, configmap("twice", namespace))
    with pytest.raises(Conflict, match="UID in the precondition"):
        await client.delete(CONFIGMAPS, "twice", namespace, uid=old["metadata"]["uid"])
    assert await client.get(CONFIGMAPS, "twice", namespace)
    requests = METRICS_REGISTRY.get_sample_value(
        "rest_client_requests_total",
        {"code": "409", "method": "DELETE", "host": _host(client)},
    )
    assert requests is not None
    assert requests >= 1


def _condition(type: str, ok: bool, reason: str = "Ok") -> dict[str, Any]:
    return {"type": type, "status": "True" if ok else "False", "reason": reason, "message": type}


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    found = (obj.get("status") or {}).get("conditions") or []
    assert len(found) == len({c["type"] for c in found}), found  # no type twice
    return {c["type"]: (c["status"], c["reason"]) for c in found}


async def test_status_writer_writes_only_on_change_and_never_loses_a_write(
    client: Client, namespace: str, widget_crd: Resource
) -> None:
    widget = {
        "apiVersion": widget_crd.api_version,
        "kind": widget_crd.kind,
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {},
    }
    created = await client.create(widget_crd, widget)
    labeller, driver = StatusWriter(client), StatusWriter(client)  # two controllers

    written = await labeller.write(widget_crd, created, [_condition("Labelled", True)])
    assert written is not None
    assert _conditions(written) == {"Labelled": ("True", "Ok")}
    assert await labeller.write(widget_crd, written, [_condition("Labelled", True)]) is None

    # Each writes from a copy that predates the other's writes: no write is lost.
    stale = written
    written = await driver.write(widget_crd, stale, [_condition("Driver", False, "Waiting")])
    assert written is not None
    written = await labeller.write(widget_crd, stale, [_condition("Labelled", False, "Gone")])
    assert written is not None
    written = await driver.write(widget_crd, stale, [_condition("Driver", True)], {"state": "up"})
    assert written is not None
    assert _conditions(written) == {"Labelled": ("False", "Gone"), "Driver": ("True", "Ok")}
    assert written["status"]["state"] == "up"

    # A copy that shows the wanted value but predates this writer's later write is not
    # trusted: it is read afresh, and the value written.
    shows_waiting = {**stale, "status": {"conditions": [_condition("Driver", False, "Waiting")]}}
    shows_waiting["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    back = await driver.write(widget_crd, shows_waiting, [_condition("Driver", False, "Waiting")])
    assert back is not None
    stored = await client.get(widget_crd, "w", namespace)
    assert _conditions(stored)["Driver"] == ("False", "Waiting")

    # Someone reorders the list: the guarded entry is found again at its new place.
    reordered = list(reversed(stored["status"]["conditions"]))
    await client.merge_patch(
        widget_crd, "w", {"status": {"conditions": reordered}}, namespace, sub="status"
    )
    written = await labeller.write(widget_crd, stored, [_condition("Labelled", True)])
    assert written is not None
    assert _conditions(written) == {"Labelled": ("True", "Ok"), "Driver": ("False", "Waiting")}


async def test_status_writer_forgets_what_the_cache_caught_up_with_and_is_bounded(
    client: Client, namespace: str, widget_crd: Resource
) -> None:
    """Issue 22: its memory of writes ends once a copy shows the write, or when full."""
    writer = StatusWriter(client, remember=2)
    written = []
    for name in ("a", "b", "c"):
        widget = {"apiVersion": widget_crd.api_version, "kind": widget_crd.kind}
        widget["metadata"] = {"name": name, "namespace": namespace}
        created = await client.create(widget_crd, widget)
        result = await writer.write(widget_crd, created, [_condition("Ready", True)])
        assert result is not None
        written.append(result)
    assert writer.remembered == 2, "the least recently written was forgotten"
    # The caught-up copies (at the written resourceVersions): nothing to write, memory ends.
    for copy in written[1:]:
        assert await writer.write(widget_crd, copy, [_condition("Ready", True)]) is None
    assert writer.remembered == 0
    # A later change is still written, from the copy at hand.
    changed = await writer.write(widget_crd, written[2], [_condition("Ready", False, "Lost")])
    assert changed is not None
    assert _conditions(changed) == {"Ready": ("False", "Lost")}


async def test_status_writer_refusal_as_it_stands_propagates(
    client: Client, namespace: str
) -> None:
    deployments = Resource("apps/v1", "Deployment", "deployments")
    pod = {"containers": [{"name": "c", "image": "x"}]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "refused", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod},
        },
    }
    created = await client.create(deployments, deployment)
    with pytest.raises(Invalid, match="replicas"):
        await StatusWriter(client).write(deployments, created, fields={"replicas": -1})


async def test_a_resource_declared_with_the_wrong_scope_is_refused(
    control_plane: ControlPlane, namespace: str
) -> None:
    async def noop(request: Request) -> None:
        return None

    wrong = Resource("v1", "Node", "nodes")  # namespaced=True by default: wrong for Nodes
    manager = await Manager.create(
        control_plane.kubeconfig, metrics_bind_address=None, health_probe_bind_address=None
    )
    manager.add_controller("wrong-scope", noop, for_=wrong, namespace=namespace)
    with pytest.raises(ValueError, match="disagrees with the API server"):
        await asyncio.wait_for(manager.start(asyncio.Event()), 30)


async def test_custom_checks_decide_the_probes(control_plane: ControlPlane, namespace: str) -> None:
    healthy, ready = [True], [False]

    async def ready_check() -> bool:
        return ready[0]

    manager = await Manager.create(
        control_plane.kubeconfig,
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        leader_election=LeaderElection("probes", namespace),
    )
    manager.add_healthz_check("webhook-alive", lambda: healthy[0])
    manager.add_readyz_check("certificate", ready_check)
    manager.cache.informer(CONFIGMAPS, namespace=namespace)
    async with running(manager), aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{manager.health_probe_port}"

        async def status(path: str) -> tuple[int, str]:
            async with http.get(base + path) as response:
                return response.status, await response.text()

        assert await status("/healthz") == (200, "ok")
        assert await status("/readyz") == (
            503,
            "[+]caches ok\n[-]certificate failed\nreadyz failed",
        )
        ready[0], healthy[0] = True, False
        assert await status("/readyz") == (200, "ok")
        code, text = await status("/healthz")
        assert code == 500
        assert "[-]webhook-alive failed" in text
        await eventually(lambda: manager.is_leader)
        master = METRICS_REGISTRY.get_sample_value(
            "leader_election_master_status", {"name": "probes"}
        )
        assert master == 1.0
    assert (
        METRICS_REGISTRY.get_sample_value("leader_election_master_status", {"name": "probes"})
        == 0.0
    )


async def _absent(client: Client, namespace: str, name: str) -> bool:
    return not [
        o for o in await client.list(CONFIGMAPS, namespace) if o["metadata"]["name"] == name
    ]


def _host(client: Client) -> str:
    return client.api_client.configuration.host.split("://", 1)[1]


async def test_a_flood_of_events_is_aggregated_and_capped(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    subject = await client.create(CONFIGMAPS, configmap("flooded", namespace))
    manager = await Manager.create(
        control_plane.kubeconfig, metrics_bind_address=None, health_probe_bind_address=None
    )
    recorder = manager.event_recorder("flood-test")
    async with running(manager):
        for i in range(200):  # a hot loop: returns at once, never waits for the API server
            recorder.event(subject, "Warning", "Failing", f"attempt {i} failed")
        await recorder.flush()
    events = await client.list(EVENTS, namespace)
    assert 1 <= len(events) <= 11  # 10 distinct messages, then one combined Event
    assert sum(e["count"] for e in events) == 25  # the spam filter's burst
    assert any(e["message"].startswith("(combined from similar events): ") for e in events)


async def test_a_metadata_only_informer_lists_and_watches_metadata(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, configmap("listed", namespace, {"a": "1"}, big="x" * 1000))
    manager = await Manager.create(
        control_plane.kubeconfig, metrics_bind_address=None, health_probe_bind_address=None
    )
    manager.cache.informer(CONFIGMAPS, namespace=namespace, metadata_only=True)

    def cached(name: str) -> dict[str, Any] | None:
        return manager.cache.get(CONFIGMAPS, name, namespace, metadata_only=True)

    async with running(manager):
        listed = cached("listed")
        assert listed is not None
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "ConfigMap")
        assert "data" not in listed
        await client.create(CONFIGMAPS, configmap("watched", namespace, big="y" * 1000))
        await client.merge_patch(
            CONFIGMAPS, "listed", {"metadata": {"labels": {"a": "2"}}}, namespace
        )
        await eventually(lambda: cached("watched") is not None)
        await eventually(lambda: (cached("listed") or {})["metadata"]["labels"] == {"a": "2"})
        watched = cached("watched")
        assert watched is not None
        assert watched["kind"] == "ConfigMap"
        assert "data" not in watched


class FlakyHandler:
    """Fails on the first add, update and delete of each object, then records them."""

    def __init__(self) -> None:
        self.failed: set[tuple[str, str]] = set()
        self.events: list[tuple[str, str]] = []

    def _deliver(self, kind: str, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if (kind, name) not in self.failed:
            self.failed.add((kind, name))
            raise RuntimeError(f"handler bug on {kind} {name}")
        self.events.append((kind, name))

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._deliver("add", obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._deliver("update", new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        self._deliver("delete", obj)


async def test_an_event_a_handler_failed_on_is_delivered_again(
    client: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 22: a handler that raises does not lose the event: the object comes back as a
    resync (or the same delete), after a backoff; one traceback, then one line per failure."""
    informer = Informer(client, CONFIGMAPS, namespace=namespace)
    flaky = FlakyHandler()
    informer.add_handler(flaky)
    stop = asyncio.Event()
    running = asyncio.create_task(informer.start(stop))
    try:
        await informer.wait_for_sync()
        await client.create(CONFIGMAPS, configmap("a", namespace))
        # the add failed; a resync is an update, which fails once too, then is taken
        await eventually(lambda: ("update", "a") in flaky.events, within=20)
        await client.delete(CONFIGMAPS, "a", namespace)
        await eventually(lambda: ("delete", "a") in flaky.events, within=20)
    finally:
        stop.set()
        await running
    assert ("add", "a") not in flaky.events
    failures = [r for r in caplog.records if "event handler" in r.getMessage()]
    assert len(failures) >= 3
    assert sum(r.exc_info is not None for r in failures) == 1
