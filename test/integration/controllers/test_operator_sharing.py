"""GPU sharing through devicePlugin.config on a real cluster: the device plugin and GPU feature
discovery run NVIDIA's config-manager on gpuctrl's copy of the accepted configs; a node label
selects a config without replacing any pod, a change of the configs rolls the pods onto the new
copy, and a refused config leaves the last good copy and pods running, saying why in the
conditions and an Event. An MPS config is accepted, and NVIDIA's MPS control daemon runs (and
is counted) only on the node labelled MPS-capable, and goes and comes with the device plugin.
The simulated kubelet does not run NVIDIA's images, so this asserts what gpuctrl controls; the
tests run in order on one cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    CONFIG_MAPS,
    DAEMON_SETS,
    EVENTS,
    NODES,
    POLICIES,
    conditions,
    policy,
    running_manager,
)

from gpuctrl.runtime import Client, Resource
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
POLICY = "cluster"
PODS = Resource("v1", "Pod", "pods")
USERS = "plugin-configs"
OPERANDS = {
    "gpuctrl-device-plugin": ("DevicePluginReady", "gpuctrl-device-plugin-config"),
    "gpuctrl-gpu-feature-discovery": ("GFDReady", "gpuctrl-gpu-feature-discovery-config"),
}
CONFIG_LABEL = "nvidia.com/device-plugin.config"


def time_sliced(replicas: int) -> str:
    return (
        "version: v1\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        f"      replicas: {replicas}\n"
    )


CONFIGS = {"default": "version: v1\n", "time-sliced-4": time_sliced(4)}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def operator(cluster: ControlPlane, client: Client) -> AsyncIterator[None]:
    """Two GPU nodes, the user's ConfigMap of configs, a policy naming it, a running manager."""
    async with SimulatedKubelet(cluster.kubeconfig, simulated_gpu_nodes("gpu", count=2)):
        namespaces = await client.resource("v1", "Namespace")
        await client.create(namespaces, {"metadata": {"name": NAMESPACE}})
        users = {"metadata": {"name": USERS, "namespace": NAMESPACE}, "data": CONFIGS}
        await client.create(CONFIG_MAPS, users)
        spec = {
            "driver": {"enabled": False},
            "devicePlugin": {"config": {"name": USERS, "default": "default"}},
        }
        await client.create(POLICIES, policy(POLICY, spec))
        async with running_manager(cluster.kubeconfig, NAMESPACE):
            yield


async def copies(client: Client) -> dict[str, dict[str, str]]:
    """The data of each operand's copy of the configs, by DaemonSet."""
    return {
        ds: (await client.get(CONFIG_MAPS, copy, NAMESPACE)).get("data") or {}
        for ds, (_, copy) in OPERANDS.items()
    }


async def templates(client: Client) -> dict[str, dict[str, Any]]:
    """Each operand DaemonSet's pod template."""
    return {
        ds: (await client.get(DAEMON_SETS, ds, NAMESPACE))["spec"]["template"] for ds in OPERANDS
    }


async def pods(client: Client) -> dict[str, set[str]]:
    """The uids of each operand's pods."""
    return {
        ds: {
            p["metadata"]["uid"]
            for p in await client.list(
                PODS,
                NAMESPACE,
                label_selector=f"app.kubernetes.io/component={ds.removeprefix('gpuctrl-')}",
            )
            if not p["metadata"].get("deletionTimestamp")
        }
        for ds in OPERANDS
    }


async def ready(client: Client) -> dict[str, Any]:
    """Wait until both operands are ready on both nodes for the policy's generation, their
    DaemonSets rolled out; the policy's conditions."""

    async def check() -> dict[str, Any]:
        obj = await client.get(POLICIES, POLICY)
        found = conditions(obj.get("status") or {})
        for condition, _ in OPERANDS.values():
            assert found.get(condition, {}).get("status") == "True", found.get(condition)
        for ds in OPERANDS:
            found_ds = await client.get(DAEMON_SETS, ds, NAMESPACE)
            status = found_ds["status"]
            assert status.get("observedGeneration") == found_ds["metadata"]["generation"]
            assert status.get("updatedNumberScheduled") == status.get("numberAvailable") == 2
        assert all(len(uids) == 2 for uids in (await pods(client)).values())
        return found

    return await eventually(check, within=120)


async def test_the_operands_run_nvidias_config_manager_on_gpuctrls_copy(
    operator: None, client: Client
) -> None:
    found = await ready(client)
    assert found["DevicePluginReady"]["reason"] == "Reconciled"
    assert await copies(client) == dict.fromkeys(OPERANDS, CONFIGS)
    for ds, template in (await templates(client)).items():
        spec = template["spec"]
        assert spec["shareProcessNamespace"] is True
        inits = {c["name"]: c for c in spec["initContainers"]}
        sidecar = {c["name"]: c for c in spec["containers"]}["config-manager"]
        for container in (inits["config-manager-init"], sidecar):
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["DEFAULT_CONFIG"] == "default"
            assert env["NODE_LABEL"] == CONFIG_LABEL
        config_volumes = [v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v]
        assert config_volumes == [OPERANDS[ds][1]]  # the copy, never the user's ConfigMap


async def test_a_node_label_selects_a_config_without_replacing_a_pod(
    operator: None, client: Client
) -> None:
    before_pods, before_templates = await pods(client), await templates(client)
    await client.merge_patch(
        NODES, "gpu-0", {"metadata": {"labels": {CONFIG_LABEL: "time-sliced-4"}}}
    )

    async def labelled() -> None:
        node = await client.get(NODES, "gpu-0")
        assert node["metadata"]["labels"][CONFIG_LABEL] == "time-sliced-4"

    await eventually(labelled, within=10)
    await ready(client)
    # NVIDIA's config-manager sidecar follows the label in the running pods: gpuctrl rolls
    # nothing, and the copy holds the config the label names.
    assert await templates(client) == before_templates
    assert await pods(client) == before_pods
    assert all(data["time-sliced-4"] == time_sliced(4) for data in (await copies(client)).values())


async def test_a_changed_config_reaches_the_copy_and_rolls_the_pods(
    operator: None, client: Client
) -> None:
    before_pods, before_templates = await pods(client), await templates(client)
    patch = {"data": {"time-sliced-4": time_sliced(8)}}
    await client.merge_patch(CONFIG_MAPS, USERS, patch, NAMESPACE)

    async def copied() -> None:
        assert all(d["time-sliced-4"] == time_sliced(8) for d in (await copies(client)).values())

    await eventually(copied, within=60)

    async def rolled() -> None:
        now = await pods(client)
        assert all(len(now[ds]) == 2 and not now[ds] & before_pods[ds] for ds in OPERANDS), now

    await eventually(rolled, within=120)
    await ready(client)
    after = await templates(client)
    for ds in OPERANDS:
        hash_key = "gpuctrl.io/config-hash"
        assert (
            after[ds]["metadata"]["annotations"][hash_key]
            != (before_templates[ds]["metadata"]["annotations"][hash_key])
        )


async def test_a_refused_config_keeps_the_last_good_one_running(
    operator: None, client: Client
) -> None:
    before_pods, before_templates, before_copies = (
        await pods(client),
        await templates(client),
        await copies(client),
    )
    patch = {"data": {"time-sliced-4": time_sliced(1)}}
    await client.merge_patch(CONFIG_MAPS, USERS, patch, NAMESPACE)
    where = "time-sliced-4: sharing.timeSlicing.resources[0].replicas: must be at least 2"

    async def refused() -> dict[str, Any]:
        found = conditions((await client.get(POLICIES, POLICY))["status"])
        for condition, _ in OPERANDS.values():
            assert found[condition]["status"] == "False", found[condition]
            assert found[condition]["reason"] == "InvalidDevicePluginConfig"
            assert where in found[condition]["message"]
        assert found.get("Ready", {}).get("status") == "False", sorted(found)
        return found

    await eventually(refused, within=60)

    async def warned() -> None:
        events = await client.list(
            EVENTS, "default", field_selector=f"involvedObject.name={POLICY}"
        )
        refusals = [
            e
            for e in events
            if e["reason"] == "InvalidDevicePluginConfig" and where in e["message"]
        ]
        assert {e["type"] for e in refusals} == {"Warning"}
        said = {e["message"].split(":", 1)[0] for e in refusals}
        assert {"DevicePluginReady", "GFDReady"} <= said, said

    await eventually(warned, within=30)
    # the last good configs keep running: the copy, the pod templates and the pods as they were
    assert await copies(client) == before_copies
    assert await templates(client) == before_templates
    assert await pods(client) == before_pods

    await client.merge_patch(
        CONFIG_MAPS, USERS, {"data": {"time-sliced-4": time_sliced(4)}}, NAMESPACE
    )

    async def fixed() -> None:
        assert all(d["time-sliced-4"] == time_sliced(4) for d in (await copies(client)).values())

    await eventually(fixed, within=60)
    await ready(client)


MPS_DAEMON = "gpuctrl-mps-control-daemon"
MPS_CAPABLE = "nvidia.com/mps.capable"
MPS_4 = (
    "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
)


async def mps_daemon(client: Client, nodes: int) -> dict[str, Any]:
    """Wait until the MPS control daemon is ready on ``nodes`` nodes, counted in its condition
    and the policy's readyNodes for the policy's generation; its condition."""

    async def check() -> dict[str, Any]:
        obj = await client.get(POLICIES, POLICY)
        status = obj.get("status") or {}
        found = conditions(status).get("MPSControlDaemonReady", {})
        assert found.get("observedGeneration") == obj["metadata"]["generation"], found
        assert (found["status"], found["reason"]) == ("True", "Reconciled"), found
        assert found["message"] == f"mps-control-daemon: {nodes}/{nodes} nodes ready"
        assert (status.get("state"), status.get("readyNodes")) == ("ready", "2/2"), status
        ds = await client.get(DAEMON_SETS, MPS_DAEMON, NAMESPACE)
        assert (ds.get("status") or {}).get("numberAvailable", 0) == nodes, ds.get("status")
        return dict(found)

    return await eventually(check, within=120)


async def daemon_nodes(client: Client) -> set[str]:
    """The nodes of the MPS control daemon's pods."""
    selector = "app=nvidia-device-plugin-mps-control-daemon"  # NVIDIA's, as on every operand
    found = await client.list(PODS, NAMESPACE, label_selector=selector)
    return {p["spec"]["nodeName"] for p in found if not p["metadata"].get("deletionTimestamp")}


async def test_an_mps_config_is_accepted_and_the_daemon_runs_only_where_mps_capable(
    operator: None, client: Client
) -> None:
    await mps_daemon(client, 0)  # deployed with the device plugin, on no node yet
    await client.merge_patch(CONFIG_MAPS, USERS, {"data": {"mps-4": MPS_4}}, NAMESPACE)

    async def copied() -> None:
        copy = await client.get(CONFIG_MAPS, f"{MPS_DAEMON}-config", NAMESPACE)
        assert copy["data"].get("mps-4") == MPS_4
        assert all(d.get("mps-4") == MPS_4 for d in (await copies(client)).values())

    await eventually(copied, within=60)
    await ready(client)
    # gpu-1 is put on the MPS config; GPU feature discovery (simulated here) labels it so.
    labels = {CONFIG_LABEL: "mps-4", MPS_CAPABLE: "true"}
    await client.merge_patch(NODES, "gpu-1", {"metadata": {"labels": labels}})
    await mps_daemon(client, 1)
    assert await daemon_nodes(client) == {"gpu-1"}
    ds = await client.get(DAEMON_SETS, MPS_DAEMON, NAMESPACE)
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        MPS_CAPABLE: "true",
    }
    assert [c["name"] for c in pod["containers"]] == ["mps-control-daemon-ctr", "config-manager"]
    # Back on a time-sliced config GPU feature discovery says false: the daemon leaves.
    labels = {CONFIG_LABEL: "time-sliced-4", MPS_CAPABLE: "false"}
    await client.merge_patch(NODES, "gpu-1", {"metadata": {"labels": labels}})
    await mps_daemon(client, 0)

    async def left() -> None:
        assert await daemon_nodes(client) == set()

    await eventually(left, within=60)


async def test_the_mps_daemon_goes_and_comes_with_the_device_plugin(
    operator: None, client: Client
) -> None:
    await client.merge_patch(NODES, "gpu-0", {"metadata": {"labels": {MPS_CAPABLE: "true"}}})
    await mps_daemon(client, 1)
    await client.merge_patch(POLICIES, POLICY, {"spec": {"devicePlugin": {"enabled": False}}})

    async def removed() -> None:
        sets = {d["metadata"]["name"] for d in await client.list(DAEMON_SETS, NAMESPACE)}
        assert MPS_DAEMON not in sets, sets
        found = conditions((await client.get(POLICIES, POLICY))["status"])
        daemon = found.get("MPSControlDaemonReady", {})
        assert (daemon.get("status"), daemon.get("reason")) == ("True", "Disabled"), daemon

    await eventually(removed, within=60)
    await client.merge_patch(POLICIES, POLICY, {"spec": {"devicePlugin": {"enabled": True}}})
    await mps_daemon(client, 1)
    await ready(client)
