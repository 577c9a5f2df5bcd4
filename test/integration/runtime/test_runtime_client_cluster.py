"""Client helpers against a real API server: apply, conflicts, events, discovery."""

import asyncio
from contextlib import aclosing

import aiohttp
import pytest
from runtime_helpers import CONFIGMAPS, configmap

from gpuctrl.runtime import (
    EVENTS,
    AlreadyExists,
    Client,
    Conflict,
    EventRecorder,
    EventSink,
    NotFound,
    new_api_client,
    retry_on_conflict,
)
from gpuctrl.testing import ControlPlane


async def test_server_side_apply_conflicts_unless_forced(client: Client, namespace: str) -> None:
    await client.apply(CONFIGMAPS, configmap("ssa", namespace, k="one"), field_manager="first")
    applied = await client.apply(
        CONFIGMAPS, configmap("ssa", namespace, k="one", other="x"), field_manager="first"
    )
    assert applied["data"] == {"k": "one", "other": "x"}
    with pytest.raises(Conflict, match="conflict"):
        await client.apply(CONFIGMAPS, configmap("ssa", namespace, k="two"), field_manager="second")
    forced = await client.apply(
        CONFIGMAPS, configmap("ssa", namespace, k="two"), field_manager="second", force=True
    )
    assert forced["data"]["k"] == "two"
    managers = {m["manager"] for m in forced["metadata"]["managedFields"]}
    assert {"first", "second"} <= managers


async def test_errors_are_typed(client: Client, namespace: str) -> None:
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "absent", namespace)
    await client.create(CONFIGMAPS, configmap("twice", namespace))
    with pytest.raises(AlreadyExists):
        await client.create(CONFIGMAPS, configmap("twice", namespace))
    await client.delete(CONFIGMAPS, "absent", namespace)  # absent is fine by default
    with pytest.raises(NotFound):
        await client.delete(CONFIGMAPS, "absent", namespace, missing_ok=False)


async def test_retry_on_conflict_rereads_until_the_write_lands(
    client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, configmap("counter", namespace, n="0"))
    attempts = 0

    async def increment() -> None:
        nonlocal attempts
        attempts += 1
        current = await client.get(CONFIGMAPS, "counter", namespace)
        if attempts == 1:  # someone else writes between our read and our write
            await client.merge_patch(CONFIGMAPS, "counter", {"data": {"n": "5"}}, namespace)
        current["data"]["n"] = str(int(current["data"]["n"]) + 1)
        await client.replace(CONFIGMAPS, current)

    await retry_on_conflict(increment)
    assert attempts == 2
    assert (await client.get(CONFIGMAPS, "counter", namespace))["data"]["n"] == "6"


async def test_event_recorder_counts_repeats(client: Client, namespace: str) -> None:
    subject = await client.create(CONFIGMAPS, configmap("subject", namespace))
    sink = EventSink(client)
    stop = asyncio.Event()
    sending = asyncio.create_task(sink.start(stop))
    recorder = EventRecorder(sink, "gpuctrl-test")
    for _ in range(3):
        recorder.event(subject, "Warning", "Broken", "it broke")
    recorder.event(subject, "Normal", "Fixed", "it works")
    await recorder.flush()
    stop.set()
    await sending
    events = await client.list(EVENTS, namespace)
    by_reason = {e["reason"]: e for e in events}
    assert len(events) == 2
    assert by_reason["Broken"]["count"] == 3
    assert by_reason["Fixed"]["count"] == 1
    involved = by_reason["Broken"]["involvedObject"]
    assert involved["uid"] == subject["metadata"]["uid"]
    assert involved["kind"] == "ConfigMap"
    assert by_reason["Broken"]["source"]["component"] == "gpuctrl-test"


async def test_discovery_finds_resources(client: Client) -> None:
    deployments = await client.resource("apps/v1", "Deployment")
    assert (deployments.plural, deployments.namespaced) == ("deployments", True)
    nodes = await client.resource("v1", "Node")
    assert (nodes.plural, nodes.namespaced) == ("nodes", False)
    with pytest.raises(ValueError, match="no kind 'Nope' in apps/v1"):
        await client.resource("apps/v1", "Nope")


async def test_watch_yields_the_events_after_a_resource_version(
    client: Client, namespace: str
) -> None:
    path = CONFIGMAPS.path(namespace)
    listed = await client.request("GET", path)
    await client.create(CONFIGMAPS, configmap("watched", namespace, k="v"))
    limits = aiohttp.ClientTimeout(total=30)
    query = {"resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": 10}
    async with aclosing(client.watch(path, query, limits)) as events:
        first = await anext(events)
    assert first["type"] == "ADDED"
    assert first["object"]["metadata"]["name"] == "watched"
    assert first["object"]["data"] == {"k": "v"}


async def test_a_request_takes_no_thread(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No request hops to a thread (aiohttp's netrc and proxy lookups did, twice each): behind
    a loop kept busy by CPU-bound reconciles such a thread waits for the GIL, and a Lease
    renewal took seconds. The environment's proxy is still honoured, read once."""
    loop = asyncio.get_running_loop()
    hops: list[object] = []
    real = loop.run_in_executor

    def counted(executor: object, func: object, *args: object) -> asyncio.Future[object]:
        hops.append(func)
        return real(executor, func, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "run_in_executor", counted)
    async with await new_api_client(control_plane.kubeconfig) as api:
        for _ in range(3):
            await Client(api).request("GET", "/version")
    assert hops == []
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "")
    async with await new_api_client(control_plane.kubeconfig) as api:
        assert api.configuration.proxy == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    async with await new_api_client(control_plane.kubeconfig) as api:
        assert api.configuration.proxy is None
