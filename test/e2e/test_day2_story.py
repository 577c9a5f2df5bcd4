"""Issue 15, "Day 2", end to end: `gpuctrl manager` as a process on a local cluster, four
simulated GPU nodes of two OS releases, every operand on, the toolkit agent running for real
(bubblewrap) against each node's own containerd config; the other operands simulated.

Changing ``driver.version`` upgrades the nodes through the upgrade controller, two at a time,
the apiserver restarting mid-rollout (every node gets a driver pod of the new image, the old
ones go, and every toolkit agent is restarted on the new driver, as NVIDIA's driver manager
does: its CDI specs name the driver's files). A node of a
third OS joins: it gets a driver DaemonSet of its own, its driver pod runs and its toolkit
agent puts the ``nvidia`` runtime into its config, runc untouched. Removing that node and one
of another OS leaves nothing for them: no pod bound to them, no DaemonSet for the OS that has
no node left, the other OS's DaemonSet down to its one node, and the policy counting the
nodes that are left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from e2e_stack import (
    DAEMON_SETS,
    PODS,
    POLICIES,
    assert_nvidia_added,
    conditions,
    is_ready,
    managed_cluster,
    pods_of,
    policy_ready,
)

from gpuctrl.runtime import Client, Resource
from gpuctrl.testing import (
    ContainerBehavior,
    ControlPlane,
    SimulatedKubelet,
    SimulatedNode,
    eventually,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "test" / "data" / "toolkit" / "containerd"
NAMESPACE = "gpuctrl"
POLICY_NAME = "day-2"
DRIVER = "nvidia-driver-ctr"
TOOLKIT = "toolkit"
CONFIG = "etc/containerd/config.toml"
NFD = "feature.node.kubernetes.io"
OLD, NEW = "550.127.05", "560.35.03"
CONTROLLER_REVISIONS = Resource("apps/v1", "ControllerRevision", "controllerrevisions")
# (os_id, version) -> the containerd config the node starts with, as that release's
# containerd leaves it (a runc runtime, SystemdCgroup on for the ubuntu ones).
SEEDS = {
    ("ubuntu", "22.04"): (CORPUS / "installer-systemd-cgroup.toml").read_bytes(),
    ("ubuntu", "24.04"): (CORPUS / "containerd-2-v3.toml").read_bytes(),
    ("debian", "12"): (CORPUS / "containerd-1.7-default.toml").read_bytes(),
}
POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "ClusterPolicy",
    "metadata": {"name": POLICY_NAME},
    "spec": {
        "driver": {
            "version": OLD,
            "upgradePolicy": {"maxParallelUpgrades": 2, "maxUnavailable": "50%"},
        },
        # No containerd runs in the sandbox to be told to reload; the config itself is
        # edited (containerd 2's default config imports conf.d, where auto would write).
        "toolkit": {"containerd": {"restartMode": "none", "dropInMode": "never"}},
    },
}


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, Client]]:
    """A cluster of this test's own with gpuctrl's CRDs and ``gpuctrl manager`` running."""
    async with managed_cluster(tmp_path / "manager.log") as cluster:
        yield cluster


def _node(folder: Path, name: str, os_id: str, version: str) -> SimulatedNode:
    """A node whose root holds its release's containerd config."""
    config = folder / name / CONFIG
    config.parent.mkdir(parents=True)
    config.write_bytes(SEEDS[(os_id, version)])
    return SimulatedNode(name=name, os_id=os_id, os_version=version, root=folder / name)


def _has_nvidia(node: SimulatedNode) -> None:
    """The node's config has the nvidia runtime and its runc exactly as seeded."""
    assert node.root is not None
    assert_nvidia_added(SEEDS[(node.os_id, node.os_version)], (node.root / CONFIG).read_bytes())


async def _by_node(admin: Client, container: str) -> dict[str, dict[str, Any]]:
    """The pods with ``container`` by node; a node with two of them fails the check."""
    pods = await pods_of(admin, NAMESPACE, container)
    found: dict[str, dict[str, Any]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName", "")
        assert node not in found, (
            f"two {container} pods on {node}: {[p['metadata']['name'] for p in pods]}"
        )
        found[node] = pod
    return found


def _image(pod: dict[str, Any], container: str) -> str:
    return str(next(c["image"] for c in pod["spec"]["containers"] if c["name"] == container))


def _driver_image(node: SimulatedNode, version: str) -> str:
    return f"nvcr.io/nvidia/driver:{version}-{node.os_id}{node.os_version}"


async def _converged(
    admin: Client, nodes: list[SimulatedNode], version: str, *, within: float
) -> dict[str, Any]:
    """Wait until every node runs one Ready driver pod of ``version`` and one Ready toolkit
    pod whose agent has installed the runtime, and the policy is ready; its status."""

    async def running() -> None:
        drivers, toolkits = await _by_node(admin, DRIVER), await _by_node(admin, TOOLKIT)
        names = sorted(n.name for n in nodes)
        assert sorted(drivers) == names, drivers
        assert sorted(toolkits) == names, toolkits
        for node in nodes:
            driver, toolkit = drivers[node.name], toolkits[node.name]
            assert _image(driver, DRIVER) == _driver_image(node, version)
            assert is_ready(driver), driver["status"]
            assert is_ready(toolkit), toolkit["status"]
            _has_nvidia(node)

    await eventually(running, within=within)
    # The policy controller counts after the pods' and nodes' events reach it.
    count = f"{len(nodes)}/{len(nodes)}"
    return await policy_ready(admin, POLICY_NAME, within=60, ready_nodes=count)


async def _driver_says(admin: Client, message: str) -> None:
    """Wait until DriverReady is True with ``message``: the driver controller writes its counts
    once the DaemonSet controller's status reaches it, and retries a write that lost a race
    with the other controllers' (a Conflict), so they may lag the policy's readyNodes."""

    async def says() -> None:
        found = conditions((await admin.get(POLICIES, POLICY_NAME))["status"])["DriverReady"]
        assert (found["status"], found["message"]) == ("True", message), found

    await eventually(says, within=30)


async def _upgrade_rolls_the_drivers(
    plane: ControlPlane, admin: Client, nodes: list[SimulatedNode]
) -> None:
    """A new ``driver.version``, with the apiserver restarting mid-rollout (every watch of
    the manager, the kubelet and the controller-manager breaks): every node gets a driver pod
    of it, none of the old ones stays, and each toolkit agent is restarted after it."""
    before = {p["metadata"]["uid"] for p in (await _by_node(admin, DRIVER)).values()}
    toolkits = {n: p["metadata"]["uid"] for n, p in (await _by_node(admin, TOOLKIT)).items()}
    await admin.merge_patch(POLICIES, POLICY_NAME, {"spec": {"driver": {"version": NEW}}})

    async def rolling() -> None:
        now = {p["metadata"]["uid"] for p in (await _by_node(admin, DRIVER)).values()}
        assert now != before

    await eventually(rolling, within=60, interval=0.05)
    await plane.restart_apiserver()
    await _converged(admin, nodes, NEW, within=180)
    after = {p["metadata"]["uid"] for p in (await _by_node(admin, DRIVER)).values()}
    assert not before & after, (before, after)
    now = {n: p["metadata"]["uid"] for n, p in (await _by_node(admin, TOOLKIT)).items()}
    assert now.keys() == toolkits.keys()
    assert not set(now.values()) & set(toolkits.values()), "a toolkit agent was not restarted"


async def _new_os_gets_its_driver(
    admin: Client, kubelet: SimulatedKubelet, nodes: list[SimulatedNode], node: SimulatedNode
) -> None:
    """``node``, of an OS no other node has, joins: a driver DaemonSet of its own selects it
    by its NFD OS labels, and its agents run there."""
    await kubelet.add_nodes([node])
    await _converged(admin, [*nodes, node], NEW, within=180)
    tag = f"{node.os_id}{node.os_version}"
    await _driver_says(
        admin, f"driver: 5/5 nodes ready ({tag} 1/1, ubuntu22.04 2/2, ubuntu24.04 2/2)"
    )
    name = f"gpuctrl-driver-{node.os_id}{node.os_version}"
    owner = (await _by_node(admin, DRIVER))[node.name]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("DaemonSet", name)
    daemonset = await admin.get(DAEMON_SETS, name, NAMESPACE)
    selector = daemonset["spec"]["template"]["spec"]["nodeSelector"]
    assert selector[f"{NFD}/system-os_release.ID"] == node.os_id
    assert selector[f"{NFD}/system-os_release.VERSION_ID"] == node.os_version


async def _nothing_left_for(admin: Client, gone: list[str], daemonset: str) -> None:
    """No pod is bound to the nodes ``gone``, and ``daemonset`` (of an OS that has no node
    left) is deleted with its ControllerRevisions."""
    bound = [
        p["metadata"]["name"] for p in await admin.list(PODS) if p["spec"].get("nodeName") in gone
    ]
    assert bound == [], bound  # the pod GC deletes them, after its 40 s quarantine
    daemonsets = {d["metadata"]["name"]: d for d in await admin.list(DAEMON_SETS, NAMESPACE)}
    assert daemonset not in daemonsets, sorted(daemonsets)
    revisions = await admin.list(CONTROLLER_REVISIONS, NAMESPACE)
    owners = {o["name"] for r in revisions for o in r["metadata"].get("ownerReferences") or []}
    assert daemonset not in owners, owners


async def test_day2_driver_upgrade_new_os_node_and_node_removal(
    cluster: tuple[ControlPlane, Client], tmp_path: Path
) -> None:
    plane, admin = cluster
    folder = tmp_path / "nodes"
    releases = [("ubuntu", "22.04"), ("ubuntu", "24.04")] * 2
    nodes = [_node(folder, f"day2-{i}", *release) for i, release in enumerate(releases)]
    async with SimulatedKubelet(plane.kubeconfig, nodes) as kubelet:
        kubelet.set_behavior(
            behavior=ContainerBehavior(process=True), container=TOOLKIT, image="*/gpuctrl:*"
        )
        await admin.create(POLICIES, POLICY)
        await _converged(admin, nodes, OLD, within=180)

        await _upgrade_rolls_the_drivers(plane, admin, nodes)

        debian = _node(folder, "day2-debian", "debian", "12")
        await _new_os_gets_its_driver(admin, kubelet, nodes, debian)

        # Remove it and one ubuntu 24.04 node.
        gone = [debian.name, nodes[3].name]
        await kubelet.remove_nodes(gone)
        await eventually(
            lambda: _nothing_left_for(admin, gone, "gpuctrl-driver-debian12"), within=150
        )
        await _converged(admin, nodes[:3], NEW, within=60)
        await _driver_says(admin, "driver: 3/3 nodes ready (ubuntu22.04 2/2, ubuntu24.04 1/1)")
