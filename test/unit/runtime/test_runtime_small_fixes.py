"""Smaller contracts of issue 9: resyncs reach reconcilers, conflicts retry on the injected
clock, the pod's namespace, unique controller names, bind addresses (a busy one named), null
list items."""

import asyncio
import itertools
import socket
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from gpuctrl.runtime import (
    Cache,
    CannotListen,
    Client,
    Conflict,
    LeaderElection,
    Manager,
    Request,
    Resource,
    build_controller,
    pod_namespace,
    retry_on_conflict,
)
from gpuctrl.runtime._http import HttpServer, parse_bind_address
from gpuctrl.runtime._listjson import read_list
from gpuctrl.runtime.webhook import WebhookServer
from gpuctrl.testing import FakeClock, write_secret_volume
from gpuctrl.testing._pki import self_signed_pair

CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")


async def test_a_resync_reaches_a_controller_with_default_predicates(clock: FakeClock) -> None:
    reconciled: list[Request] = []

    async def reconcile(request: Request) -> None:
        reconciled.append(request)

    async with ApiClient(Configuration()) as api:
        cache = Cache(Client(api), resync_period=60.0, clock=clock)
        controller = build_controller(cache, "resynced", reconcile, for_=CONFIGMAPS)
        informer = cache.informer(CONFIGMAPS)
        informer.replace([{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}])
        stop = asyncio.Event()
        resyncing = asyncio.create_task(informer._resync_forever())
        running = asyncio.create_task(controller.start(stop))
        await clock.step()
        assert reconciled == [Request("ns", "a")]
        await clock.step(66.0)  # 60 s, jittered by up to 10 %
        assert reconciled == [Request("ns", "a")] * 2
        resyncing.cancel()
        stop.set()
        await running


async def test_retry_on_conflict_waits_on_the_given_clock(clock: FakeClock) -> None:
    tries: list[float] = []

    async def attempt() -> str:
        tries.append(clock.now())
        if len(tries) < 5:
            raise Conflict(409, "Conflict", "stale")
        return "done"

    task = asyncio.create_task(retry_on_conflict(attempt, delay=5.0, max_delay=15.0, clock=clock))
    await clock.step()
    while not task.done():
        deadline = clock.next_deadline
        assert deadline is not None
        await clock.step(deadline - clock.now())
    assert await task == "done"
    # Twice as long each time (at most 10% jitter), capped at max_delay: 5, 10, 15, 15.
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    for gap, base in zip(gaps, (5.0, 10.0, 15.0, 15.0), strict=True):
        assert base <= gap <= base * 1.1


def test_pod_namespace_from_the_environment_then_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "namespace"
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert pod_namespace(token) is None
    token.write_text("gpu-operator\n")
    assert pod_namespace(token) == "gpu-operator"
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    assert pod_namespace(token) == "from-env"


def test_leader_election_outside_a_pod_needs_a_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(ValueError, match="needs a namespace"):
        LeaderElection("lease")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert LeaderElection("lease").namespace == "ops"


async def test_duplicate_controller_names_are_refused() -> None:
    async def noop(request: Request) -> None:
        return None

    async with ApiClient(Configuration()) as api:
        manager = Manager(api, metrics_bind_address=None, health_probe_bind_address=None)
        manager.add_controller("one", noop, for_=CONFIGMAPS)
        with pytest.raises(ValueError, match="'one' was already added"):
            manager.add_controller("one", noop, for_=CONFIGMAPS, namespace="x")


@pytest.mark.parametrize(
    ("address", "parsed"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:81", ("::1", 81))],
    ids=["any", "loopback-free", "ipv6"],
)
def test_bind_addresses(address: str, parsed: tuple[str, int]) -> None:
    assert parse_bind_address(address) == parsed


@pytest.mark.parametrize("address", ["8080", "host:", "h:99999", "h:x"])
def test_bad_bind_addresses_name_the_address(address: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_bind_address(address)


@pytest.mark.parametrize(
    "text",
    ['{"metadata": {"resourceVersion": "1"}, "items": null}', '{"items": null, "metadata": {}}'],
    ids=["lazy", "eager"],
)
def test_a_list_with_null_items_is_empty(text: str) -> None:
    _, items = read_list(text)
    assert list(items) == []


async def test_a_busy_address_is_named_and_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = HttpServer("127.0.0.1", port, {})
        with pytest.raises(CannotListen, match=rf"cannot listen on 127\.0\.0\.1:{port}: .*in use"):
            await server.start()
        secrets = tmp_path / "certs"
        cert, key = self_signed_pair("webhook", ["127.0.0.1"])
        write_secret_volume(secrets, {"tls.crt": cert, "tls.key": key})
        webhook = WebhookServer(secrets, host="127.0.0.1", port=port, shutdown_delay=0)
        with pytest.raises(CannotListen, match=rf"127\.0\.0\.1:{port}"):
            await webhook.start(asyncio.Event())
