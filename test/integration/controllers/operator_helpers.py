"""Helpers of the operator's integration tests: a manager in this process, its controllers'
metrics, the audit log, ClusterPolicy reads and writes."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from api.crdgen import crd_files
from controllers.cli import USER_AGENT
from controllers.manager import TRANSFORMS, setup_controllers
from gpuctrl.runtime import METRICS_REGISTRY, Client, Manager, NotFound, Resource, new_api_client
from gpuctrl.testing import eventually

ROOT = Path(__file__).resolve().parents[3]
POLICIES = Resource("gpuctrl.io/v1alpha1", "ClusterPolicy", "clusterpolicies", False)
DAEMON_SETS = Resource("apps/v1", "DaemonSet", "daemonsets")
NODES = Resource("v1", "Node", "nodes", False)
EVENTS = Resource("v1", "Event", "events")
CONFIG_MAPS = Resource("v1", "ConfigMap", "configmaps")
WRITES = ("create", "update", "patch", "delete", "deletecollection")


async def install_crds(client: Client) -> None:
    """Apply gpuctrl's CRDs and wait until ClusterPolicies are served."""
    crds = Resource(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
    )
    for text in crd_files().values():
        await client.apply(crds, yaml.safe_load(text), field_manager="test")

    async def served() -> None:
        try:
            await client.list(POLICIES)
        except NotFound as error:
            raise AssertionError("ClusterPolicies are not served yet") from error

    await eventually(served, within=30)


@asynccontextmanager
async def running_manager(kubeconfig: Path, namespace: str) -> AsyncIterator[Manager]:
    """The operator's controllers on a manager in this process (no leader election, no
    HTTP), with the manager's User-Agent; stopped on exit."""
    api = await new_api_client(kubeconfig)
    api.user_agent = USER_AGENT
    manager = Manager(
        api, metrics_bind_address=None, health_probe_bind_address=None, transforms=TRANSFORMS
    )
    setup_controllers(manager, namespace)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.start(stop))
    try:
        await eventually(manager.ready, within=30)
        yield manager
    finally:
        stop.set()
        await task


def reconciles() -> dict[str, float]:
    """Reconciles so far (every result) by controller name, in this process."""
    counts: dict[str, float] = {}
    for family in METRICS_REGISTRY.collect():
        for sample in family.samples:
            if sample.name == "controller_runtime_reconcile_total":
                name = sample.labels["controller"]
                counts[name] = counts.get(name, 0.0) + sample.value
    return counts


async def settled(manager: Manager, controllers: Collection[str]) -> None:
    """Wait until ``controllers`` have no key queued and none being reconciled, then until
    ``manager`` has sent every Event recorded so far."""
    gc.collect()  # the queues of a manager stopped earlier count until they are collected

    def idle() -> None:
        busy = {}
        sample = METRICS_REGISTRY.get_sample_value
        for name in controllers:
            queued = sample("workqueue_depth", {"name": name, "controller": name})
            running = sample("controller_runtime_active_workers", {"controller": name})
            if queued != 0 or running != 0:  # None: no such controller
                busy[name] = (queued, running)
        assert not busy, f"(queued, reconciling) by controller: {busy}"

    await eventually(idle, within=30)
    await manager.event_recorder("test").flush()


def policy(name: str, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ClusterPolicy object."""
    return {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name},
        "spec": dict(spec or {}),
    }


async def status_of(client: Client, name: str) -> dict[str, Any]:
    """A ClusterPolicy's status as stored ({} when it has none or is gone)."""
    try:
        return (await client.get(POLICIES, name)).get("status") or {}
    except NotFound:
        return {}


def conditions(status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The status's conditions by type."""
    return {c["type"]: c for c in status.get("conditions") or ()}


async def daemonsets(client: Client, namespace: str) -> dict[str, dict[str, Any]]:
    """The namespace's DaemonSets by name."""
    return {d["metadata"]["name"]: d for d in await client.list(DAEMON_SETS, namespace)}


async def delete_policies(client: Client) -> None:
    """Delete every ClusterPolicy and wait until they are gone."""
    for item in await client.list(POLICIES):
        await client.delete(POLICIES, item["metadata"]["name"])

    async def gone() -> None:
        assert await client.list(POLICIES) == []

    await eventually(gone, within=30)


class AuditLog:
    """The manager's write requests in the apiserver's audit log, from a mark on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> None:
        """Count only requests logged from now on."""
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def writes(self, *, leases: bool = False) -> list[str]:
        """The manager's writes since the mark as ``verb resource/name`` (Leases left out
        unless ``leases``: leader election renews one every 2 s by design)."""
        found = []
        with self.path.open("rb") as log:
            log.seek(self._offset)
            for line in log:
                entry = json.loads(line)
                ref = entry.get("objectRef") or {}
                if not str(entry.get("userAgent", "")).startswith(USER_AGENT):
                    continue
                if entry.get("verb") not in WRITES:
                    continue
                if ref.get("resource") == "leases" and not leases:
                    continue
                found.append(f"{entry['verb']} {ref.get('resource')}/{ref.get('name', '')}")
        return found


class ManagerProcess:
    """One ``gpuctrl manager`` subprocess and the lines it logged."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.leading = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, kubeconfig: Path, namespace: str) -> ManagerProcess:
        """Start ``gpuctrl manager`` (leader election on) for operands in ``namespace``."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuctrl", "manager",
            "--kubeconfig", str(kubeconfig),
            "--namespace", namespace,
            "--metrics-bind-address", "127.0.0.1:0",
            "--health-probe-bind-address", "127.0.0.1:0",
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if "became leader" in line:
                self.leading.set()

    async def wait_leading(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self.leading.wait()
        except TimeoutError:
            raise AssertionError("not leading:\n" + "".join(self.lines)) from None

    async def exit_code(self, seconds: float = 30) -> int:
        async with asyncio.timeout(seconds):
            code = await self.process.wait()
            await self._reader
        return code

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
