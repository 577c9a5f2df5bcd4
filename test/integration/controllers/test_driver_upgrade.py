"""Driver upgrades on a real cluster (controller-manager, scheduler, simulated kubelet): a new
``driver.version`` moves every GPU node through NVIDIA's upgrade states within the policy's
limits, as seen from a watch of the Nodes; PodDisruptionBudgets, jobs, a crash-looping driver,
an admin's cordon, skipped and requested nodes. The module's tests run in order on one fleet
of ten nodes, each leaving it upgraded and ready."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from operator_helpers import (
    EVENTS,
    NODES,
    POLICIES,
    ManagerProcess,
    conditions,
    policy,
    running_manager,
    status_of,
)

from gpuctrl.runtime import Client, Informer, Resource
from gpuctrl.testing import (
    BEHAVIOR_ANNOTATION,
    ContainerBehavior,
    ControlPlane,
    SimulatedKubelet,
    eventually,
    simulated_gpu_nodes,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
POLICY = "cluster"
STATE = "nvidia.com/gpu-driver-upgrade-state"
PODS = Resource("v1", "Pod", "pods")
DEPLOYMENTS = Resource("apps/v1", "Deployment", "deployments")
JOBS = Resource("batch/v1", "Job", "jobs")
BUDGETS = Resource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
NAMES = [f"gpu-{i}" for i in range(10)]
IN_PROGRESS = {
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
}
LIMITS = {"maxParallelUpgrades": 2, "maxUnavailable": 3, "gpuPodDeletion": {"timeoutSeconds": 0}}
ALL_AT_ONCE = {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}


@dataclass
class NodeWatch:
    """The Nodes as a watch delivers them, and the most in progress / unavailable at once."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    most_in_progress: int = 0
    most_unavailable: int = 0

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self.nodes[obj["metadata"]["name"]] = dict(obj)
        self._count()

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        self.nodes.pop(obj["metadata"]["name"], None)

    def reset(self) -> None:
        self.most_in_progress = self.most_unavailable = 0
        self._count()

    def _count(self) -> None:
        labels = [n["metadata"].get("labels") or {} for n in self.nodes.values()]
        busy = sum(1 for found in labels if found.get(STATE) in IN_PROGRESS)
        down = sum(1 for n in self.nodes.values() if (n.get("spec") or {}).get("unschedulable"))
        self.most_in_progress = max(self.most_in_progress, busy)
        self.most_unavailable = max(self.most_unavailable, down)


@dataclass
class Fleet:
    client: Client
    kubelet: SimulatedKubelet
    watch: NodeWatch
    cluster: ControlPlane
    manager: AsyncExitStack  # the in-process manager's
    version: str = "550.127.05"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(cluster: ControlPlane, client: Client) -> AsyncIterator[Fleet]:
    """Ten GPU nodes (one OS), the policy upgrading two at a time, a manager, a Node watch."""
    nodes = simulated_gpu_nodes("gpu", count=10, os_releases=(("ubuntu", "22.04"),))
    async with AsyncExitStack() as stack:
        kubelet = await stack.enter_async_context(SimulatedKubelet(cluster.kubeconfig, nodes))
        namespaces = await client.resource("v1", "Namespace")
        for name in (NAMESPACE, "ml"):
            await client.create(namespaces, {"metadata": {"name": name}})
        spec = {"driver": {"upgradePolicy": LIMITS}}
        await client.create(POLICIES, policy(POLICY, spec))
        manager = AsyncExitStack()
        await manager.enter_async_context(running_manager(cluster.kubeconfig, NAMESPACE))
        stack.push_async_callback(manager.aclose)
        watch = NodeWatch()
        informer = Informer(client, NODES)
        informer.add_handler(watch)
        stop = asyncio.Event()
        task = asyncio.create_task(informer.start(stop))
        await informer.wait_for_sync()
        try:
            found = Fleet(client, kubelet, watch, cluster, manager)
            await upgraded(found, validated=False)  # installed: nothing to upgrade
            yield found
        finally:
            stop.set()
            await task


async def set_policy(client: Client, driver: Mapping[str, Any]) -> None:
    await client.merge_patch(POLICIES, POLICY, {"spec": {"driver": driver}})


async def driver_pods(client: Client) -> dict[str, dict[str, Any]]:
    pods = await client.list(PODS, NAMESPACE, label_selector="app.kubernetes.io/component=driver")
    return {
        p["spec"]["nodeName"]: p
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


async def upgraded(
    fleet: Fleet,
    *,
    cordoned: frozenset[str] = frozenset(),
    validated: bool = True,
    within: float = 240,
) -> None:
    """Wait until every node runs a Ready driver of ``fleet.version`` (``validated``: with a
    validator pod made after it), is ``upgrade-done`` and schedulable (but ``cordoned``), and
    the policy is ready."""
    client = fleet.client

    async def done() -> None:
        drivers = await driver_pods(client)
        validators = {
            p["spec"].get("nodeName"): p
            for p in await client.list(
                PODS, NAMESPACE, label_selector="app.kubernetes.io/component=validator"
            )
        }
        for name in NAMES:
            node = fleet.watch.nodes[name]
            assert node["metadata"]["labels"].get(STATE) == "upgrade-done", (name, node["metadata"])
            assert bool(node["spec"].get("unschedulable")) == (name in cordoned), name
            pod = drivers.get(name)
            assert pod is not None, f"no driver pod on {name}"
            image = pod["spec"]["containers"][0]["image"]
            assert image.endswith(f":{fleet.version}-ubuntu22.04"), (name, image)
            assert name in validators, f"no validator pod on {name}"
            validator = validators[name]["metadata"]["creationTimestamp"]
            assert not validated or validator >= pod["metadata"]["creationTimestamp"], name
        status = await status_of(client, POLICY)
        found = conditions(status)
        for kind in ("DriverUpgrade", "DriverReady"):
            assert found.get(kind, {}).get("status") == "True", found.get(kind)
        assert status.get("state") == "ready", status

    await eventually(done, within=within)


async def new_version(fleet: Fleet, version: str, **upgrade_policy: Any) -> None:
    fleet.version = version
    driver: dict[str, Any] = {"version": version}
    if upgrade_policy:
        driver["upgradePolicy"] = upgrade_policy
    await set_policy(fleet.client, driver)


async def test_ten_nodes_two_at_a_time_within_max_unavailable(fleet: Fleet) -> None:
    client = fleet.client
    await client.merge_patch(NODES, "gpu-4", {"spec": {"unschedulable": True}})  # the admin's
    await asyncio.sleep(1)
    fleet.watch.reset()
    await new_version(fleet, "550.90.07")
    await upgraded(fleet, cordoned=frozenset({"gpu-4"}))
    assert fleet.watch.most_in_progress == 2  # in parallel, never more
    assert fleet.watch.most_unavailable <= 3  # the admin's cordon counts
    await client.merge_patch(NODES, "gpu-4", {"spec": {"unschedulable": None}})


def _gpu_pod(name: str, node: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": name,
                    "image": "registry.example.com/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


async def test_a_budget_that_allows_no_disruption_holds_the_node_and_is_named(
    fleet: Fleet,
) -> None:
    client = fleet.client
    labels = {"app": "train"}
    template = _gpu_pod("train", "gpu-1", labels)
    deployment = {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }
    await client.create(DEPLOYMENTS, deployment)
    budget = {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    await client.create(BUDGETS, budget)

    async def running() -> None:
        pods = await client.list(PODS, "ml", label_selector="app=train")
        assert [p["status"].get("phase") for p in pods] == ["Running"], pods

    await eventually(running, within=60)
    await new_version(fleet, "550.54.15", **ALL_AT_ONCE)

    async def held() -> None:
        assert (
            fleet.watch.nodes["gpu-1"]["metadata"]["labels"].get(STATE) == "pod-deletion-required"
        )
        message = conditions(await status_of(client, POLICY))["DriverUpgrade"]["message"]
        assert "gpu-1: evicting GPU pods ml/train-" in message, message
        assert "disruption budget train" in message, message
        events = await client.list(EVENTS, "default", field_selector="involvedObject.name=gpu-1")
        texts = [e["message"] for e in events if e["reason"] == "GPUDriverUpgrade"]
        assert any("disruption budget train" in t for t in texts), texts

    await eventually(held, within=120)
    await client.merge_patch(
        BUDGETS, "train", {"spec": {"minAvailable": None, "maxUnavailable": 1}}, "ml"
    )
    await upgraded(fleet)
    await client.delete(DEPLOYMENTS, "train", "ml")
    await client.delete(BUDGETS, "train", "ml")


def _job(name: str, node: str, behavior: ContainerBehavior) -> dict[str, Any]:
    template = _gpu_pod(name, node, {"job": "batch"})
    del template["spec"]["containers"][0]["resources"]
    template["spec"]["restartPolicy"] = "Never"
    behaviors = {name: behavior.model_dump(by_alias=True)}
    template["metadata"]["annotations"] = {BEHAVIOR_ANNOTATION: json.dumps(behaviors)}
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"backoffLimit": 0, "template": template},
    }


async def test_jobs_are_waited_for_until_they_finish_or_the_timeout(fleet: Fleet) -> None:
    client = fleet.client
    await client.create(JOBS, _job("short", "gpu-2", ContainerBehavior(run_seconds=6)))
    await client.create(JOBS, _job("endless", "gpu-3", ContainerBehavior(never_exits=True)))
    # The short job ends well inside the timeout even on a loaded machine (two test workers):
    # from its pod's start it runs 6 s, the endless one is given up on after 30.
    wait = {"podSelector": "job=batch", "timeoutSeconds": 30}
    await new_version(fleet, "550.127.05", waitForCompletion=wait)

    async def waiting() -> None:
        message = conditions(await status_of(client, POLICY))["DriverUpgrade"]["message"]
        for node, job in (("gpu-2", "short"), ("gpu-3", "endless")):
            assert f"{node}: waiting for pod ml/{job}-" in message, message

    await eventually(waiting, within=60)

    async def short_done_first() -> None:
        labels = fleet.watch.nodes["gpu-2"]["metadata"]["labels"]
        assert labels.get(STATE) not in ("wait-for-jobs-required", "upgrade-required"), labels
        stuck = fleet.watch.nodes["gpu-3"]["metadata"]["labels"].get(STATE)
        assert stuck == "wait-for-jobs-required"

    await eventually(short_done_first, within=25)
    await upgraded(fleet)  # gpu-3 went on at the timeout
    for name in ("short", "endless"):
        await client.delete(JOBS, name, "ml", propagation_policy="Background")
    await set_policy(client, {"upgradePolicy": {"waitForCompletion": None}})


async def test_a_crash_looping_driver_fails_its_node_and_the_others_finish(fleet: Fleet) -> None:
    client = fleet.client
    crashing = "550.100"

    def on_gpu5(pod: Mapping[str, Any]) -> bool:
        return bool(pod["spec"].get("nodeName") == "gpu-5")

    # A driver that never passes its startup probe and exits (the simulated kubelet runs no
    # startup probes: ready=False stands in for one).
    fleet.kubelet.set_behavior(
        behavior=ContainerBehavior(exit_code=1, run_seconds=0.1, ready=False),
        match=on_gpu5,
        container="nvidia-driver-ctr",
        image=f"*:{crashing}-*",
    )
    await new_version(fleet, crashing)

    async def failed() -> None:
        labels = fleet.watch.nodes["gpu-5"]["metadata"]["labels"]
        assert labels.get(STATE) == "upgrade-failed", labels
        others = [
            fleet.watch.nodes[n]["metadata"]["labels"].get(STATE) for n in NAMES if n != "gpu-5"
        ]
        assert set(others) == {"upgrade-done"}, others
        found = conditions(await status_of(client, POLICY))
        upgrade = found["DriverUpgrade"]
        assert (upgrade["status"], upgrade["reason"]) == ("False", "UpgradeFailed"), upgrade
        assert "9/10 upgraded" in upgrade["message"], upgrade
        assert "1 failed (gpu-5: driver pod gpuctrl/" in upgrade["message"], upgrade
        assert "restarted 11 times" in upgrade["message"], upgrade
        assert found["DriverReady"]["status"] == "False"

    await eventually(failed, within=180)
    assert fleet.watch.nodes["gpu-5"]["spec"].get("unschedulable") is True
    # The fault fixed and the node's label deleted: it goes through the steps again.
    fleet.kubelet.set_behavior(
        behavior=ContainerBehavior(never_exits=True), match=on_gpu5, container="nvidia-driver-ctr"
    )
    await client.json_patch(
        NODES, "gpu-5", [{"op": "remove", "path": "/metadata/labels/" + STATE.replace("/", "~1")}]
    )
    await upgraded(fleet)


async def test_skipped_and_requested_nodes(fleet: Fleet) -> None:
    client = fleet.client
    before = (await driver_pods(client))["gpu-7"]["metadata"]["uid"]
    await client.merge_patch(
        NODES,
        "gpu-7",
        {"metadata": {"annotations": {"nvidia.com/gpu-driver-upgrade-requested": "true"}}},
    )

    async def replaced() -> None:
        pod = (await driver_pods(client)).get("gpu-7")
        assert pod is not None
        assert pod["metadata"]["uid"] != before
        node = fleet.watch.nodes["gpu-7"]
        assert node["metadata"]["labels"].get(STATE) == "upgrade-done"
        assert "nvidia.com/gpu-driver-upgrade-requested" not in node["metadata"].get(
            "annotations", {}
        )

    await eventually(replaced, within=120)
    skip = {"metadata": {"labels": {"nvidia.com/gpu-driver-upgrade.skip": "true"}}}
    await client.merge_patch(NODES, "gpu-6", skip)
    old = (await driver_pods(client))["gpu-6"]["metadata"]["uid"]
    await new_version(fleet, "550.127.08")

    async def others_upgraded() -> None:
        drivers = await driver_pods(client)
        assert set(drivers) >= set(NAMES), sorted(drivers)
        for name in NAMES:
            image = drivers[name]["spec"]["containers"][0]["image"]
            assert (":550.127.08-" in image) == (name != "gpu-6"), (name, image)
        assert drivers["gpu-6"]["metadata"]["uid"] == old

    await eventually(others_upgraded, within=180)
    driver_ready = conditions(await status_of(client, POLICY))["DriverReady"]
    assert driver_ready["status"] == "False", driver_ready  # gpu-6 runs the old driver
    unskip = {"metadata": {"labels": {"nvidia.com/gpu-driver-upgrade.skip": None}}}
    await client.merge_patch(NODES, "gpu-6", unskip)
    await upgraded(fleet)
    assert json.dumps(fleet.watch.nodes["gpu-6"]["metadata"]["labels"]).count("skip") == 0


async def test_a_manager_killed_mid_upgrade_is_resumed_by_its_standby(fleet: Fleet) -> None:
    await fleet.manager.aclose()  # from here on, two `gpuctrl manager` processes
    kubeconfig = fleet.cluster.kubeconfig
    first = await ManagerProcess.start(kubeconfig, NAMESPACE)
    processes = [first]
    try:
        await first.wait_leading(60)
        second = await ManagerProcess.start(kubeconfig, NAMESPACE)
        processes.append(second)
        fleet.watch.reset()
        await new_version(fleet, "550.127.09", **LIMITS)

        async def midway() -> None:
            labels = [n["metadata"].get("labels") or {} for n in fleet.watch.nodes.values()]
            upgrading = [found for found in labels if found.get(STATE) in IN_PROGRESS]
            assert len(upgrading) == 2, [found.get(STATE) for found in labels]

        await eventually(midway, within=60, interval=0.05)
        first.process.send_signal(signal.SIGKILL)
        await second.wait_leading(30)
        await upgraded(fleet)
        assert fleet.watch.most_in_progress <= 2
        assert fleet.watch.most_unavailable <= 3
        assert "Traceback" not in "".join(second.lines), "".join(second.lines)
    finally:
        for process in processes:
            process.kill()
