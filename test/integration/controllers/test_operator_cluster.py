"""The operator keeps a real cluster converged: one manager for the module's tests, which run
in order on one cluster (mixed OS nodes, one ClusterPolicy) and each leave it converged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    NODES,
    POLICIES,
    AuditLog,
    conditions,
    daemonsets,
    policy,
    running_manager,
    status_of,
)

from gpuctrl.runtime import Client, Manager
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
POLICY = "cluster"
OS_RELEASES = (("ubuntu", "22.04"), ("ubuntu", "24.04"), ("rhel", "9.4"))
DRIVERS = {"gpuctrl-driver-ubuntu22.04", "gpuctrl-driver-ubuntu24.04", "gpuctrl-driver-rhel9.4"}
AGENTS = {"gpuctrl-toolkit", "gpuctrl-validator", "gpuctrl-device-plugin"}
DEPLOY = {
    f"nvidia.com/gpu.deploy.{operand}": "true"
    for operand in ("driver", "container-toolkit", "operator-validator", "device-plugin")
}


class Running:
    """The module's manager, restartable."""

    def __init__(self, cluster: ControlPlane) -> None:
        self.cluster = cluster
        self.stack = AsyncExitStack()
        self.manager: Manager | None = None

    async def start(self) -> None:
        self.manager = await self.stack.enter_async_context(
            running_manager(self.cluster.kubeconfig, NAMESPACE)
        )

    async def stop(self) -> None:
        await self.stack.aclose()
        self.stack = AsyncExitStack()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def operator(cluster: ControlPlane, client: Client) -> AsyncIterator[Running]:
    """Nodes of three OS versions (and one without a GPU), the operands namespace, the policy
    and a running manager."""
    nodes = simulated_gpu_nodes("gpu", count=4, os_releases=OS_RELEASES)
    nodes += simulated_gpu_nodes("cpu", count=1, gpus=0)
    async with SimulatedKubelet(cluster.kubeconfig, nodes):
        namespaces = await client.resource("v1", "Namespace")
        await client.create(namespaces, {"metadata": {"name": NAMESPACE}})
        await client.create(POLICIES, policy(POLICY))
        running = Running(cluster)
        await running.start()
        try:
            yield running
        finally:
            await running.stop()


async def converged(client: Client, ready_nodes: str = "4/4") -> dict[str, Any]:
    """Wait until the policy is ready with ``ready_nodes``; its status."""

    async def ready() -> dict[str, Any]:
        status = await status_of(client, POLICY)
        assert status.get("state") == "ready", status
        assert status.get("readyNodes") == ready_nodes, status
        return status

    return await eventually(ready, within=90)


async def test_mixed_os_cluster_converges(
    operator: Running, client: Client, cluster: ControlPlane
) -> None:
    status = await converged(client)
    writes = AuditLog(cluster.audit_log).writes()  # the audit log sees the manager's writes
    assert {"patch daemonsets/gpuctrl-toolkit", "patch nodes/gpu-0"} <= set(writes)
    found = conditions(status)
    assert {t: c["status"] for t, c in found.items()} == dict.fromkeys(
        (
            "NodesLabelled",
            "DriverReady",
            "ToolkitReady",
            "ValidatorReady",
            "DevicePluginReady",
            "Ready",
        ),
        "True",
    )
    assert found["DriverReady"]["message"] == (
        "driver: 4/4 nodes ready (rhel9.4 1/1, ubuntu22.04 2/2, ubuntu24.04 1/1)"
    )
    assert status["namespace"] == NAMESPACE
    sets = await daemonsets(client, NAMESPACE)
    assert set(sets) == DRIVERS | AGENTS
    for ds in sets.values():
        owner = ds["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == (
            "ClusterPolicy",
            POLICY,
            True,
        )
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in await client.list(NODES)}
    for name, node_labels in labels.items():
        if name.startswith("gpu-"):
            assert node_labels["nvidia.com/gpu.present"] == "true"
            assert DEPLOY.items() <= node_labels.items()
        else:
            assert "nvidia.com/gpu.present" not in node_labels
            assert not DEPLOY.keys() & node_labels.keys()


async def test_no_writes_after_convergence_nor_after_a_restart(
    operator: Running, client: Client, cluster: ControlPlane
) -> None:
    await converged(client)
    audit = AuditLog(cluster.audit_log)
    await asyncio.sleep(2)  # the last status events settle
    audit.mark()
    await asyncio.sleep(30)
    assert audit.writes() == []
    await operator.stop()
    audit.mark()
    await operator.start()
    await asyncio.sleep(15)
    assert audit.writes() == []
    await converged(client)
