"""Issue 15, "The containerd config survives", end to end: `gpuctrl manager` as a process on a
local cluster, a ClusterPolicy with the toolkit on, and on two simulated GPU nodes of different
OS releases the rendered toolkit DaemonSet's agent running for real (bubblewrap) against each
node's own containerd config.

The node's file gains the ``nvidia`` runtime and keeps runc as it was; a power cut in the
middle of an install leaves the original or the complete new file and the next run finishes
it; deleting the ClusterPolicy (pods get SIGTERM with their grace) leaves every file
byte-identical to what the node had.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from e2e_stack import (
    PODS,
    POLICIES,
    assert_nvidia_added,
    containerd_runtimes,
    managed_cluster,
)

from gpuctrl.runtime import Client
from gpuctrl.testing import (
    ContainerBehavior,
    ControlPlane,
    SimulatedKubelet,
    eventually,
    seed_gpu_host,
    simulated_gpu_nodes,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "test" / "data" / "toolkit" / "containerd"
NAMESPACE = "gpuctrl"
CONFIG = "etc/containerd/config.toml"
STATE = "var/lib/gpuctrl/toolkit"
# (os_id, version) -> the config containerd left there: a runc runtime with SystemdCgroup.
SEEDS = {
    ("ubuntu", "22.04"): (CORPUS / "installer-systemd-cgroup.toml").read_bytes(),  # version 2
    ("ubuntu", "24.04"): (CORPUS / "containerd-2-v3.toml").read_bytes(),  # containerd 2.x
}
POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "containerd-survives"},
    "spec": {
        "driver": {"enabled": False},
        "validator": {"enabled": False},
        "devicePlugin": {"enabled": False},
        # No containerd runs in the sandbox to be told to reload; the config itself is
        # edited (containerd 2's default config imports conf.d, where auto would write).
        "toolkit": {"containerd": {"restartMode": "none", "dropInMode": "never"}},
    },
}


def _installed(original: bytes, now: bytes) -> None:
    """``now`` is ``original`` with the nvidia runtime added and runc (SystemdCgroup on)
    exactly as it was."""
    assert_nvidia_added(original, now)
    assert containerd_runtimes(now)["runc"]["options"]["SystemdCgroup"] is True


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, Client]]:
    """A cluster of this test's own with gpuctrl's CRDs and ``gpuctrl manager`` running."""
    async with managed_cluster(tmp_path / "manager.log") as cluster:
        yield cluster


async def _toolkit_pods(admin: Client) -> dict[str, dict[str, Any]]:
    """The toolkit agent's pods by node."""
    pods = await admin.list(PODS, NAMESPACE)
    return {
        p["spec"].get("nodeName", ""): p
        for p in pods
        if any(c["name"] == "toolkit" for c in p["spec"]["containers"])
    }


def _ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


async def test_containerd_config_survives_install_power_cut_and_policy_deletion(
    cluster: tuple[ControlPlane, Client],
) -> None:
    plane, admin = cluster
    nodes = simulated_gpu_nodes("survives", count=2, os_releases=list(SEEDS))
    async with SimulatedKubelet(plane.kubeconfig, nodes) as kubelet:
        kubelet.set_behavior(behavior=ContainerBehavior(process=True), image="*/gpuctrl:*")
        config: dict[str, Path] = {}
        original: dict[str, bytes] = {}
        for node in kubelet.nodes:
            assert node.root is not None
            config[node.name] = node.root / CONFIG
            original[node.name] = SEEDS[(node.os_id, node.os_version)]
            # A GPU host: the toolkit installs only once its driver check finds a driver.
            seed_gpu_host(node.root, original[node.name].decode())
            assert config[node.name].read_bytes() == original[node.name]
        victim = kubelet.nodes[1]
        assert victim.root is not None

        await admin.create(POLICIES, POLICY)

        # The power cut: as soon as the agent writes into its state folder (the kubelet
        # creates the folder itself, a read-write mount), the install is under way; every
        # process of the node is SIGKILLed there and then.
        async def journal_begun() -> None:
            state = victim.root / STATE
            assert state.is_dir(), await _toolkit_pods(admin)
            assert any(state.iterdir()), await _toolkit_pods(admin)

        await eventually(journal_begun, within=40, interval=0.01)
        await kubelet.restart_node(victim.name)
        after_cut = config[victim.name].read_bytes()
        if after_cut != original[victim.name]:
            _installed(original[victim.name], after_cut)

        async def all_ready() -> None:
            pods = await _toolkit_pods(admin)
            assert sorted(pods) == sorted(config), pods
            for node, pod in pods.items():
                assert _ready(pod), (node, pod.get("status"))
                # Ready is the agent's ready file: installed, and SIGTERM now runs cleanup.
                _installed(original[node], config[node].read_bytes())

        await eventually(all_ready, within=120)

        async def policy_ready() -> None:
            status = (await admin.get(POLICIES, POLICY["metadata"]["name"])).get("status", {})
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            assert conditions.get("ToolkitReady") == "True", status

        await eventually(policy_ready, within=60)
        restarts = (await _toolkit_pods(admin))[victim.name]["status"]["containerStatuses"]
        assert restarts[0]["restartCount"] == 1

        # Deleting the ClusterPolicy: the DaemonSet goes, its pods get SIGTERM and their
        # grace, each agent undoes what its journal records.
        pods = {node: pod["metadata"]["name"] for node, pod in (await _toolkit_pods(admin)).items()}
        await admin.delete(POLICIES, POLICY["metadata"]["name"])

        async def gone() -> None:
            assert await _toolkit_pods(admin) == {}

        await eventually(gone, within=120)
        for node, path in config.items():
            logs = kubelet.process_logs(NAMESPACE, pods[node])
            assert path.read_bytes() == original[node], (node, logs)
