"""The whole stack of the end-to-end tests: a local cluster with gpuctrl's CRDs served, and
``gpuctrl manager`` and ``gpuctrl webhook`` as processes - output in a log file, metrics and
probes on free loopback ports, awaited on /readyz, stopped with SIGTERM, which must exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from api.crdgen import crd_files
from gpuctrl.runtime import Client, NotFound, Resource, new_api_client
from gpuctrl.testing import ControlPlane, eventually

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
    ) as process:  # fmt: skip
        await ready(probes, log)
        yield process
