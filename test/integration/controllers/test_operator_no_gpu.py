"""A cluster without one GPU node: the ClusterPolicy is ready with reason NoGPUNodes, no node is
labelled, no driver is rendered; the first GPU node takes the reason away."""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import (
    NODES,
    POLICIES,
    conditions,
    daemonsets,
    policy,
    running_manager,
    status_of,
)

from gpuctrl.runtime import Client
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
CONTROLLER_CONDITIONS = (
    "NodesLabelled",
    "DriverReady",
    "ToolkitReady",
    "ValidatorReady",
    "DevicePluginReady",
    "GFDReady",
    "DCGMExporterReady",
)


async def test_no_gpu_nodes_is_ready_with_reason_no_gpu_nodes(
    cluster: ControlPlane, client: Client
) -> None:
    cpu_nodes = simulated_gpu_nodes("cpu", count=2, gpus=0)
    async with SimulatedKubelet(cluster.kubeconfig, cpu_nodes) as kubelet:
        namespaces = await client.resource("v1", "Namespace")
        await client.create(namespaces, {"metadata": {"name": NAMESPACE}})
        await client.create(POLICIES, policy("cluster"))
        async with running_manager(cluster.kubeconfig, NAMESPACE):

            async def ready_without_gpus() -> dict[str, Any]:
                status = await status_of(client, "cluster")
                assert status.get("state") == "ready", status
                found = conditions(status)
                assert (found["Ready"]["status"], found["Ready"]["reason"]) == (
                    "True",
                    "NoGPUNodes",
                ), found["Ready"]
                for kind in CONTROLLER_CONDITIONS:
                    assert (found[kind]["status"], found[kind]["reason"]) == (
                        "True",
                        "NoGPUNodes",
                    ), found[kind]
                assert status.get("readyNodes") == "0/0", status
                return status

            await eventually(ready_without_gpus, within=60)
            sets = await daemonsets(client, NAMESPACE)
            assert not [name for name in sets if name.startswith("gpuctrl-driver")], sets
            for node in await client.list(NODES):
                labels = node["metadata"].get("labels") or {}
                assert not [k for k in labels if k.startswith("nvidia.com/")], labels

            await kubelet.add_nodes(simulated_gpu_nodes("gpu", count=1))

            async def a_gpu_node_counts() -> None:
                status = await status_of(client, "cluster")
                found = conditions(status)
                assert found["NodesLabelled"]["reason"] != "NoGPUNodes", found
                assert found["DriverReady"]["reason"] != "NoGPUNodes", found
                assert found["Ready"]["reason"] != "NoGPUNodes", found
                assert status.get("readyNodes", "").endswith("/1"), status

            await eventually(a_gpu_node_counts, within=60)
