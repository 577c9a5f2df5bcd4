"""The whole stack of the end-to-end tests: a local cluster with gpuctrl's CRDs served, and
``gpuctrl manager`` and ``gpuctrl webhook`` as processes - output in a log file, metrics and
probes on free loopback ports, awaited on /readyz, stopped with SIGTERM, which must exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from api.crdgen import crd_files
from gpuctrl.runtime import Client, NotFound, Resource, new_api_client
from gpuctrl.testing import ControlPlane, eventually
from gpuctrl.validator import DEFAULT_OUTPUT_DIR

GPUCTRL = str(Path(sys.executable).with_name("gpuctrl"))
CRDS = Resource(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
POLICIES = Resource("gpuctrl.io/v1alpha1", "ClusterPolicy", "clusterpolicies", False)
PODS = Resource("v1", "Pod", "pods")
DAEMON_SETS = Resource("apps/v1", "DaemonSet", "daemonsets")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(log: Path) -> str:
    """The end of a process's log, for a failure message."""
    return log.read_text(errors="replace")[-3000:]


@asynccontextmanager
async def gpuctrl(log: Path, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """A `gpuctrl` process, its output in ``log``; stopped with SIGTERM, which must exit 0."""
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            GPUCTRL,
            *args,
            stdout=output,
            stderr=output,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(30):
                code = await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"gpuctrl {args[0]} ignored SIGTERM:\n{tail(log)}") from None
        assert code == 0, f"gpuctrl {args[0]} exited {code}:\n{tail(log)}"


async def ready(port: int, log: Path) -> None:
    """Wait until /readyz on ``port`` answers 200 (60 s)."""

    async def answers() -> None:
        url = f"http://127.0.0.1:{port}/readyz"
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                assert response.status == 200
        except aiohttp.ClientError as error:
            raise AssertionError(f"not ready: {error}\n{tail(log)}") from error

    await eventually(answers, within=60)


@asynccontextmanager
async def operator_cluster(**options: Any) -> AsyncIterator[tuple[ControlPlane, Client]]:
    """A control plane of the caller's own (controller-manager and scheduler on; ``options`` go
    to `ControlPlane`) serving gpuctrl's CRDs, and an admin client on it."""
    async with (
        ControlPlane(controller_manager=True, scheduler=True, **options) as plane,
        await new_api_client(plane.kubeconfig) as api,
    ):
        admin = Client(api)
        for text in crd_files().values():
            await admin.apply(CRDS, yaml.safe_load(text), field_manager="e2e")

        async def served() -> None:
            try:
                await admin.list(POLICIES)
            except NotFound as error:
                raise AssertionError("ClusterPolicies are not served yet") from error

        await eventually(served, within=30)
        yield plane, admin


@asynccontextmanager
async def running_manager(
    kubeconfig: Path, namespace: str, log: Path, *flags: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``gpuctrl manager`` for ``namespace`` (``flags`` appended, e.g. ``--no-leader-elect``),
    once ready."""
    probes = free_port()
    async with gpuctrl(
        log, "manager", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
        "--health-probe-bind-address", f"127.0.0.1:{probes}",
        "--metrics-bind-address", f"127.0.0.1:{free_port()}",
        *flags,
    ) as process:  # fmt: skip
        await ready(probes, log)
        yield process


@asynccontextmanager
async def running_webhook(
    kubeconfig: Path, namespace: str, folder: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``gpuctrl webhook`` for ``namespace`` on a loopback port, keeping its certificates and
    its MutatingWebhookConfiguration (pointing at that port) itself, once ready; its log is
    ``folder/webhook.log``."""
    port, probes = free_port(), free_port()
    log = folder / "webhook.log"
    async with gpuctrl(
        log, "webhook", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
        "--bind-address", f"127.0.0.1:{port}",
        "--webhook-url", f"https://127.0.0.1:{port}/mutate-v1-pod",
        "--manage-certificates", "--cert-dir", str(folder / "certs"),
        "--health-probe-bind-address", f"127.0.0.1:{probes}",
        "--metrics-bind-address", f"127.0.0.1:{free_port()}",
        "--shutdown-delay", "0",  # called by URL: no Service endpoints to wait for
    ) as process:  # fmt: skip
        await ready(probes, log)
        yield process


# The stories' shared checks (node-local repository, day 2).
NODES = Resource("v1", "Node", "nodes", False)
NAMESPACES = Resource("v1", "Namespace", "namespaces", False)
STATUS_DIR = str(DEFAULT_OUTPUT_DIR).lstrip("/")
"""NVIDIA's status folder, as a path under a node's folder."""
CONFIG_MAPS = Resource("v1", "ConfigMap", "configmaps")


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A status's conditions by type."""
    return {c["type"]: c for c in status.get("conditions") or []}


async def policy_ready(
    admin: Client, name: str, *, within: float, ready_nodes: str | None = None
) -> dict[str, Any]:
    """Wait until ClusterPolicy ``name`` is ``ready`` for its current generation (and, given
    ``ready_nodes``, its ``status.readyNodes`` says so, e.g. ``4/4``); its status."""

    async def ready() -> dict[str, Any]:
        policy = await admin.get(POLICIES, name)
        status: dict[str, Any] = policy.get("status") or {}
        aggregate = conditions(status).get("Ready", {})
        assert status.get("state") == "ready", status
        assert aggregate.get("observedGeneration") == policy["metadata"]["generation"], status
        if ready_nodes is not None:
            assert status.get("readyNodes") == ready_nodes, status
        return status

    return await eventually(ready, within=within)


async def pods_of(admin: Client, namespace: str, container: str) -> list[dict[str, Any]]:
    """The pods in ``namespace`` that have a container named ``container``."""
    pods = await admin.list(PODS, namespace)
    return [p for p in pods if any(c["name"] == container for c in p["spec"]["containers"])]


def is_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    return conditions(pod.get("status") or {}).get("Ready", {}).get("status") == "True"


async def container_log(admin: Client, namespace: str, pod: str, container: str) -> str:
    """What ``kubectl logs`` shows of ``container``, read through the apiserver."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    body = await admin.read(path, {"container": container}, accept="*/*")
    return body.decode(errors="replace")


@asynccontextmanager
async def managed_cluster(log: Path) -> AsyncIterator[tuple[ControlPlane, Client]]:
    """`operator_cluster` with ``gpuctrl manager`` running on it (no leader election) for
    the ``gpuctrl`` namespace, its output in ``log``."""
    async with (
        operator_cluster() as (plane, admin),
        running_manager(plane.kubeconfig, "gpuctrl", log, "--no-leader-elect"),
    ):
        yield plane, admin


def containerd_runtimes(text: bytes) -> dict[str, Any]:
    """The CRI runtimes table of a containerd config, version 2 or 3."""
    plugins = tomllib.loads(text.decode())["plugins"]
    cri = plugins.get("io.containerd.cri.v1.runtime") or plugins["io.containerd.grpc.v1.cri"]
    return dict(cri["containerd"]["runtimes"])


def assert_nvidia_added(original: bytes, now: bytes) -> None:
    """``now`` is the containerd config ``original`` with the nvidia runtime added and runc
    exactly as it was."""
    runtimes = containerd_runtimes(now)
    assert "nvidia" in runtimes, now.decode()
    assert runtimes["nvidia"]["options"]["BinaryName"].endswith("/nvidia-container-runtime")
    assert runtimes["runc"] == containerd_runtimes(original)["runc"]
