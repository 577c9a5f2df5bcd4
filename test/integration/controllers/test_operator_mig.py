"""The MIG label flow on a real cluster, with a simulated MIG manager that answers as NVIDIA's
does (mig-parted's reconfigure script): on a new ``nvidia.com/mig.config`` it writes
``mig.config.state=pending``, pauses the GPU clients by rewriting their deploy labels to
``paused-for-mig-change``, applies the config and writes ``success`` with the labels restored;
a config its file lacks is ``failed``. gpuctrl labels only MIG-capable nodes for the MIG
manager (``mig.capable=true``, or without that label a MIG-capable ``gpu.product``, never a
vGPU host), sets NVIDIA's ``all-disabled`` default there, never fights the paused labels, and
asks of the node none of the paused clients, as NVIDIA's readiness does. The tests run in order
on one cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import yaml
from operator_helpers import (
    CONFIG_MAPS,
    DAEMON_SETS,
    NODES,
    POLICIES,
    AuditLog,
    conditions,
    policy,
    running_manager,
    status_of,
)

from gpuctrl.runtime import Client, NotFound, Resource
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
POLICY = "cluster"
PODS = Resource("v1", "Pod", "pods")
MIG_NODE = "mig-0"
CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
DEPLOY = "nvidia.com/gpu.deploy."
PLAIN_NODE = "gpu-0"
# The GPU clients NVIDIA's reconfigure script pauses (a label that is false stays false).
CLIENTS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
# The `app` values of the pods it then waits to be gone from the node, of the validation pods
# it deletes, and of the validator pod it deletes once the new layout is applied (mig-parted
# v0.10.0's reconfigure-mig.sh: kubectl wait --for=delete / delete pod -l app=...).
STOPPED = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "nvidia-dcgm",
)
REMOVED = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")
VALIDATOR = "nvidia-operator-validator"


class SimulatedMigManager:
    """NVIDIA's MIG manager on one node, as its reconfigure script behaves: it reads the
    configs gpuctrl mounts (the copy ``gpuctrl-mig-parted-config``), and follows the node's
    ``mig.config`` label. ``hold`` keeps the clients paused until released."""

    def __init__(self, client: Client, node: str) -> None:
        self.client = client
        self.node = node
        self.hold = asyncio.Event()
        self.hold.set()
        self.applied: str | None = None
        self.found: set[str] = set()  # the clients' apps it found on the node, then waited out
        self.restarted: set[str] = set()  # the UIDs of the validator pods it deleted

    async def run(self) -> None:
        while True:
            labels = await self._labels()
            wanted = labels.get(CONFIG)
            if wanted and wanted != self.applied:
                await self._reconfigure(wanted, labels)
            await asyncio.sleep(0.2)

    async def _labels(self) -> dict[str, str]:
        node = await self.client.get(NODES, self.node)
        return dict(node["metadata"].get("labels") or {})

    async def _set(self, labels: dict[str, str | None]) -> None:
        await self.client.merge_patch(NODES, self.node, {"metadata": {"labels": labels}})

    async def _reconfigure(self, wanted: str, labels: dict[str, str]) -> None:
        try:  # a MIG manager pod starts only once its config volume's ConfigMap exists
            copy = await self.client.get(CONFIG_MAPS, "gpuctrl-mig-parted-config", NAMESPACE)
        except NotFound:
            return
        self.applied = wanted
        configs = yaml.safe_load(copy["data"]["config.yaml"])["mig-configs"]
        if wanted not in configs:
            await self._set({STATE: "failed"})
            return
        paused = {
            DEPLOY + c: PAUSED for c in CLIENTS if labels.get(DEPLOY + c) not in (None, "false")
        }
        self.found = {app for app in STOPPED if await self.pods(app)}
        await self._set({STATE: "pending", **paused})
        for app in STOPPED:
            await eventually(lambda app=app: self._gone(app), within=60)
        for app in REMOVED:
            await self._delete(app)
        await self.hold.wait()
        self.restarted |= await self._delete(VALIDATOR)
        await self._set({STATE: "success", **dict.fromkeys(paused, "true")})

    async def pods(self, app: str) -> list[dict[str, Any]]:
        """The pods labelled ``app=<app>`` on its node, as the script's kubectl finds them."""
        where = f"spec.nodeName={self.node}"
        found: list[dict[str, Any]] = await self.client.list(
            PODS, NAMESPACE, label_selector=f"app={app}", field_selector=where
        )
        return found

    async def _gone(self, app: str) -> None:
        assert not await self.pods(app), app

    async def _delete(self, app: str) -> set[str]:
        pods = await self.pods(app)
        for pod in pods:
            await self.client.delete(PODS, pod["metadata"]["name"], NAMESPACE)
        return {pod["metadata"]["uid"] for pod in pods}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mig(cluster: ControlPlane, client: Client) -> AsyncIterator[SimulatedMigManager]:
    """A MIG-capable GPU node and a plain one, the default policy, a running manager and the
    simulated MIG manager on the MIG node."""
    nodes = simulated_gpu_nodes("mig", count=1, labels={"nvidia.com/mig.capable": "true"})
    nodes += simulated_gpu_nodes("gpu", count=1)
    async with SimulatedKubelet(cluster.kubeconfig, nodes):
        namespaces = await client.resource("v1", "Namespace")
        await client.create(namespaces, {"metadata": {"name": NAMESPACE}})
        await client.create(POLICIES, policy(POLICY, {"driver": {"enabled": False}}))
        async with running_manager(cluster.kubeconfig, NAMESPACE):
            manager = SimulatedMigManager(client, MIG_NODE)
            task = asyncio.create_task(manager.run())
            try:
                yield manager
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def ready(client: Client) -> dict[str, Any]:
    """The policy's status once it is ready for its generation with both nodes."""

    async def check() -> dict[str, Any]:
        status = await status_of(client, POLICY)
        assert status.get("state") == "ready", status
        assert status.get("readyNodes") == "2/2", status
        return status

    return await eventually(check, within=90)


async def labels_of(client: Client, name: str) -> dict[str, str]:
    return dict((await client.get(NODES, name))["metadata"].get("labels") or {})


async def test_only_the_mig_capable_node_runs_the_mig_manager_with_nvidias_default(
    mig: SimulatedMigManager, client: Client
) -> None:
    status = await ready(client)
    found = conditions(status)["MIGManagerReady"]
    assert (found["status"], found["reason"]) == ("True", "Reconciled"), found
    assert found["message"] == "mig-manager: 1/1 nodes ready"
    on_mig, plain = await labels_of(client, MIG_NODE), await labels_of(client, PLAIN_NODE)
    assert on_mig[DEPLOY + "mig-manager"] == "true"
    assert DEPLOY + "mig-manager" not in plain
    assert on_mig[CONFIG] == "all-disabled"  # NVIDIA's default on a MIG-capable node
    assert CONFIG not in plain
    await eventually(lambda: _state(client, "success"), within=30)  # the default applied


async def _state(client: Client, expected: str) -> None:
    assert (await labels_of(client, MIG_NODE)).get(STATE) == expected


async def test_a_reconfiguration_pauses_the_clients_and_gpuctrl_leaves_them_paused(
    mig: SimulatedMigManager, client: Client, cluster: ControlPlane
) -> None:
    await ready(client)
    restarted = set(mig.restarted)
    mig.hold.clear()
    await client.merge_patch(NODES, MIG_NODE, {"metadata": {"labels": {CONFIG: "all-1g.10gb"}}})
    await eventually(lambda: _state(client, "pending"), within=30)
    audit = AuditLog(cluster.audit_log)
    audit.mark()
    # A change the operator reads (a second NFD GPU label) while the clients are paused.
    poke = "feature.node.kubernetes.io/pci-0302_10de.present"
    await client.merge_patch(NODES, MIG_NODE, {"metadata": {"labels": {poke: "true"}}})

    async def clients_stopped() -> None:  # found by NVIDIA's labels: their DaemonSets left the node
        assert mig.found == {
            "nvidia-device-plugin-daemonset",
            "gpu-feature-discovery",
            "nvidia-dcgm-exporter",
        }
        assert not await mig.pods("nvidia-device-plugin-daemonset")

    await eventually(clients_stopped, within=60)
    # As NVIDIA's (its DaemonSets then leave the node out): paused clients are not asked of it.
    assert (await status_of(client, POLICY)).get("readyNodes") == "2/2"
    labels = await labels_of(client, MIG_NODE)
    assert {c: labels[DEPLOY + c] for c in ("device-plugin", "gpu-feature-discovery")} == {
        "device-plugin": PAUSED,
        "gpu-feature-discovery": PAUSED,
    }
    assert f"patch nodes/{MIG_NODE}" not in audit.writes()  # gpuctrl wrote none of them back
    mig.hold.set()
    await eventually(lambda: _state(client, "success"), within=30)
    assert (await labels_of(client, MIG_NODE))[DEPLOY + "device-plugin"] == "true"
    assert len(mig.restarted - restarted) == 1  # it found the validator pod by NVIDIA's label

    async def validator_back() -> None:  # the DaemonSet made a new one: validations re-run
        pods = await mig.pods(VALIDATOR)
        assert len(pods) == 1
        assert pods[0]["metadata"]["uid"] not in mig.restarted

    await eventually(validator_back, within=30)
    await ready(client)
    await client.merge_patch(NODES, MIG_NODE, {"metadata": {"labels": {poke: None}}})


async def test_an_unknown_config_fails_and_nothing_is_paused(
    mig: SimulatedMigManager, client: Client
) -> None:
    await ready(client)
    await client.merge_patch(NODES, MIG_NODE, {"metadata": {"labels": {CONFIG: "all-9g.99gb"}}})
    await eventually(lambda: _state(client, "failed"), within=30)
    labels = await labels_of(client, MIG_NODE)
    assert labels[DEPLOY + "device-plugin"] == "true"
    status = await ready(client)
    assert conditions(status)["MIGManagerReady"]["status"] == "True"


async def test_a_mig_product_without_the_label_runs_the_mig_manager_but_not_on_a_vgpu_host(
    mig: SimulatedMigManager, client: Client
) -> None:
    await ready(client)
    # GPU feature discovery's product label, without mig.capable: NVIDIA reads an A100 as MIG.
    product = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    await client.merge_patch(NODES, PLAIN_NODE, {"metadata": {"labels": product}})

    async def mig_manager_on_both(nodes: str) -> None:
        found = conditions(await status_of(client, POLICY))["MIGManagerReady"]
        assert found["message"] == f"mig-manager: {nodes} nodes ready", found

    await eventually(lambda: mig_manager_on_both("2/2"), within=60)
    labels = await labels_of(client, PLAIN_NODE)
    assert (labels[DEPLOY + "mig-manager"], labels[CONFIG]) == ("true", "all-disabled")
    await ready(client)
    # A vGPU host is never MIG-capable: gpuctrl's deploy label goes, mig.config stays (as
    # NVIDIA's, it is never removed), and the node is asked for no MIG manager.
    vgpu_host = {"nvidia.com/vgpu.host-driver-version": "550.90.05"}
    await client.merge_patch(NODES, PLAIN_NODE, {"metadata": {"labels": vgpu_host}})
    await eventually(lambda: mig_manager_on_both("1/1"), within=60)
    labels = await labels_of(client, PLAIN_NODE)
    assert DEPLOY + "mig-manager" not in labels
    assert labels[CONFIG] == "all-disabled"
    await ready(client)


async def test_the_mig_manager_disabled_goes_with_its_label_and_comes_back(
    mig: SimulatedMigManager, client: Client
) -> None:
    await ready(client)
    toggle = {"spec": {"migManager": {"enabled": False}}}
    await client.merge_patch(POLICIES, POLICY, toggle)

    async def removed() -> None:
        sets = {d["metadata"]["name"] for d in await client.list(DAEMON_SETS, NAMESPACE)}
        assert "gpuctrl-mig-manager" not in sets, sets
        assert DEPLOY + "mig-manager" not in await labels_of(client, MIG_NODE)
        found = conditions(await status_of(client, POLICY))["MIGManagerReady"]
        assert (found["status"], found["reason"]) == ("True", "Disabled"), found

    await eventually(removed, within=60)
    assert (await labels_of(client, MIG_NODE))[CONFIG]  # the node's layout is left as it is
    await client.merge_patch(POLICIES, POLICY, {"spec": {"migManager": {"enabled": None}}})

    async def back() -> None:
        assert (await labels_of(client, MIG_NODE)).get(DEPLOY + "mig-manager") == "true"
        found = conditions(await status_of(client, POLICY))["MIGManagerReady"]
        assert (found["status"], found["reason"]) == ("True", "Reconciled"), found

    await eventually(back, within=90)
    await ready(client)
