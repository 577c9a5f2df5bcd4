"""The operator keeps a real cluster converged: one manager for the module's tests, which run
in order on one cluster (mixed OS nodes, one ClusterPolicy) and each leave it converged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from operator_helpers import (
    CONFIG_MAPS,
    DAEMON_SETS,
    EVENTS,
    NODES,
    POLICIES,
    AuditLog,
    conditions,
    daemonsets,
    policy,
    reconciles,
    running_manager,
    settled,
    status_of,
)

from controllers.operands import OPERANDS
from gpuctrl.runtime import METRICS_REGISTRY as REGISTRY
from gpuctrl.runtime import Client, Manager, NotFound, Resource
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
POLICY = "cluster"
OS_RELEASES = (("ubuntu", "22.04"), ("ubuntu", "24.04"), ("rhel", "9.4"))
DRIVERS = {"gpuctrl-driver-ubuntu22.04", "gpuctrl-driver-ubuntu24.04", "gpuctrl-driver-rhel9.4"}
AGENTS = {
    "gpuctrl-toolkit",
    "gpuctrl-validator",
    "gpuctrl-device-plugin",
    "gpuctrl-gpu-feature-discovery",
    "gpuctrl-dcgm-exporter",
    "gpuctrl-mig-manager",  # on no node here: none is MIG-capable
    "gpuctrl-mps-control-daemon",  # on no node here: none is MPS-capable
}
PODS = Resource("v1", "Pod", "pods")
SERVICE_ACCOUNTS = Resource("v1", "ServiceAccount", "serviceaccounts")
RUNTIME_CLASSES = Resource("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", False)
MANAGED = "app.kubernetes.io/managed-by=gpuctrl"
GOOD_REPOS = {
    "mirror.list": "deb http://mirror.example.com/ubuntu jammy main\n",
    "mirror.repo": "[mirror]\nname=mirror\nbaseurl=http://mirror.example.com/rhel9\n",
}
# The manager's controllers, all but podpolicy-status (no PodPolicy here for it to reconcile).
CONTROLLERS = {"nodes", "nodes-status", "policy", "repo-config", "driver-upgrade"} | {
    o.component for o in OPERANDS
}
# Driver changes upgrade every node at once (the limits are test_driver_upgrade's).
ALL_AT_ONCE = {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}
POKE = "example.com/poke"  # an annotation no controller reads
SECOND_GPU_LABEL = "feature.node.kubernetes.io/pci-0302_10de.present"
DEPLOY = {
    f"nvidia.com/gpu.deploy.{operand}": "true"
    for operand in (
        "driver",
        "container-toolkit",
        "operator-validator",
        "device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
    )
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
        await client.create(POLICIES, policy(POLICY, {"driver": {"upgradePolicy": ALL_AT_ONCE}}))
        running = Running(cluster)
        await running.start()
        try:
            yield running
        finally:
            await running.stop()


async def converged(client: Client, ready_nodes: str = "4/4") -> dict[str, Any]:
    """Wait until the policy is ready for its current generation with ``ready_nodes``; its
    status."""

    async def ready() -> dict[str, Any]:
        obj = await client.get(POLICIES, POLICY)
        status = obj.get("status") or {}
        assert status.get("state") == "ready", [
            c for c in status.get("conditions", ()) if c["status"] != "True"
        ]
        generations = {c.get("observedGeneration") for c in status["conditions"]}
        assert generations == {obj["metadata"]["generation"]}, status
        assert status.get("readyNodes") == ready_nodes, status
        return status

    return await eventually(ready, within=120)


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
            "RepoConfigReady",
            "DriverReady",
            "ToolkitReady",
            "ValidatorReady",
            "DevicePluginReady",
            "MPSControlDaemonReady",
            "GFDReady",
            "DCGMReady",
            "DCGMExporterReady",
            "NodeStatusExporterReady",
            "MIGManagerReady",
            "DriverUpgrade",
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


async def poke_every_controller(client: Client, *, back: bool = False) -> None:
    """Changes that make each of `CONTROLLERS` reconcile and none of them write (``back``
    takes them back)."""
    value = None if back else "true"
    # A second NFD label of an NVIDIA device on a GPU node: read, and nothing follows.
    labels = {"metadata": {"labels": {SECOND_GPU_LABEL: value}}}
    await client.merge_patch(NODES, "gpu-0", labels)  # nodes, nodes-status
    await client.merge_patch(POLICIES, POLICY, {"metadata": {"annotations": {POKE: value}}})
    if back:  # a ConfigMap no policy names: the operands, repo-config
        await client.delete(CONFIG_MAPS, "poke", NAMESPACE)
    else:
        poke = {"metadata": {"name": "poke", "namespace": NAMESPACE}, "data": {"poke": "1"}}
        await client.create(CONFIG_MAPS, poke)


async def reconciled_since(before: dict[str, float]) -> set[str]:
    """Wait until every controller of `CONTROLLERS` has reconciled since ``before`` (from
    `reconciles`); the controllers that did."""

    def advanced() -> set[str]:
        now = reconciles()
        done = {name for name, count in now.items() if count > before.get(name, 0.0)}
        assert done >= CONTROLLERS, f"not reconciled yet: {sorted(CONTROLLERS - done)}"
        return done

    return await eventually(advanced, within=60)


async def test_no_writes_after_convergence_nor_after_a_restart(
    operator: Running, client: Client, cluster: ControlPlane
) -> None:
    """Every controller reconciles a converged cluster again, after events and after a
    restart, and none of them writes."""
    assert operator.manager is not None
    await converged(client)
    await settled(operator.manager, CONTROLLERS)
    audit = AuditLog(cluster.audit_log)
    audit.mark()
    before = reconciles()
    await poke_every_controller(client)
    await reconciled_since(before)
    await settled(operator.manager, CONTROLLERS)
    assert audit.writes() == []
    await operator.stop()
    audit.mark()
    before = reconciles()
    await operator.start()
    assert await reconciled_since(before) == CONTROLLERS  # another one belongs in CONTROLLERS
    await settled(operator.manager, CONTROLLERS)
    assert audit.writes() == []
    await poke_every_controller(client, back=True)
    await converged(client)


async def patch_policy(client: Client, spec: dict[str, Any]) -> None:
    """Merge ``spec`` into the policy's spec (None removes a field)."""
    await client.merge_patch(POLICIES, POLICY, {"spec": spec})


async def test_drift_is_reverted(operator: Running, client: Client) -> None:
    await converged(client)
    sets = await daemonsets(client, NAMESPACE)
    container = sets["gpuctrl-toolkit"]["spec"]["template"]["spec"]["containers"][0]
    drift = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": container["name"], "image": "example.com/not-gpuctrl:1"}
                    ]
                }
            }
        }
    }
    await client.request(
        "PATCH",
        DAEMON_SETS.path(NAMESPACE, "gpuctrl-toolkit"),
        body=drift,
        content_type="application/strategic-merge-patch+json",
    )
    await client.delete(DAEMON_SETS, "gpuctrl-device-plugin", NAMESPACE)

    async def reverted() -> None:
        now = await daemonsets(client, NAMESPACE)
        assert "gpuctrl-device-plugin" in now
        image = now["gpuctrl-toolkit"]["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == container["image"]

    await eventually(reverted, within=10)
    await converged(client)


PLUGIN = "gpuctrl-device-plugin"
EARLIER_SELECTOR = {"app": PLUGIN}  # what gpuctrl's DaemonSets selected before NVIDIA's labels


async def plugin_pods(client: Client) -> dict[str, dict[str, Any]]:
    """The device plugin's pods by UID."""
    selector = "app.kubernetes.io/component=device-plugin"
    return {
        p["metadata"]["uid"]: p for p in await client.list(PODS, NAMESPACE, label_selector=selector)
    }


def owner_uid(pod: dict[str, Any]) -> str | None:
    return next((o["uid"] for o in pod["metadata"].get("ownerReferences") or ()), None)


async def as_an_earlier_release_left_it(client: Client) -> str:
    """Replace the device plugin's DaemonSet (the manager stopped) by the one an earlier gpuctrl
    made, selecting ``app=gpuctrl-device-plugin``, once its own pods run; its UID."""
    current = (await daemonsets(client, NAMESPACE))[PLUGIN]
    await client.delete(DAEMON_SETS, PLUGIN, NAMESPACE, propagation_policy="Foreground")

    async def gone() -> None:
        assert PLUGIN not in await daemonsets(client, NAMESPACE)
        assert not await plugin_pods(client)

    await eventually(gone, within=60)
    meta = current["metadata"]
    template = current["spec"]["template"]
    earlier = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "ownerReferences")},
        "spec": {
            **current["spec"],
            "selector": {"matchLabels": EARLIER_SELECTOR},
            "template": {
                **template,
                "metadata": {
                    **template["metadata"],
                    "labels": {**template["metadata"]["labels"], **EARLIER_SELECTOR},
                },
            },
        },
    }
    created = await client.create(DAEMON_SETS, earlier)

    async def running() -> None:
        pods = await plugin_pods(client)
        assert len(pods) == 4
        assert {owner_uid(p) for p in pods.values()} == {created["metadata"]["uid"]}
        assert {p["status"].get("phase") for p in pods.values()} == {"Running"}

    await eventually(running, within=60)
    return str(created["metadata"]["uid"])


async def test_an_earlier_releases_daemonset_is_replaced_and_its_pods_adopted(
    operator: Running, client: Client
) -> None:
    """A DaemonSet selector never changes in place: the operator deletes the earlier one with
    its pods orphaned, and the new one adopts them (no node loses its device plugin at once)
    and rolls them to NVIDIA's ``app`` label as its update strategy says."""
    await patch_policy(client, {"daemonsets": {"updateStrategy": "OnDelete"}})
    await converged(client)
    await operator.stop()
    try:
        earlier = await as_an_earlier_release_left_it(client)
        running = set(await plugin_pods(client))
    finally:
        await operator.start()

    async def replaced() -> None:
        ds = (await daemonsets(client, NAMESPACE)).get(PLUGIN)
        assert ds is not None
        assert ds["metadata"]["uid"] != earlier
        assert ds["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/managed-by": "gpuctrl",
            "app.kubernetes.io/component": "device-plugin",
        }
        pods = await plugin_pods(client)
        assert set(pods) == running  # the same pods, kept: OnDelete
        assert {owner_uid(p) for p in pods.values()} == {ds["metadata"]["uid"]}

    await eventually(replaced, within=60)
    reasons = {(e["reason"], e["message"]) for e in await policy_events(client)}
    assert (
        "Replacing",
        f"Replacing DaemonSet {NAMESPACE}/{PLUGIN}: its pod selector changed; its pods are kept "
        "for the new one to adopt",
    ) in reasons
    await patch_policy(client, {"daemonsets": {"updateStrategy": None}})

    async def rolled() -> None:
        pods = await plugin_pods(client)
        assert {p["metadata"]["labels"]["app"] for p in pods.values()} == {
            "nvidia-device-plugin-daemonset"
        }
        assert sorted(p["spec"]["nodeName"] for p in pods.values()) == [
            f"gpu-{i}" for i in range(4)
        ]

    await eventually(rolled, within=90)
    await converged(client)


async def test_node_of_a_new_os_gets_its_driver_and_loses_it_when_removed(
    operator: Running, client: Client, cluster: ControlPlane
) -> None:
    nodes = simulated_gpu_nodes("deb", count=1, os_releases=[("debian", "12")])
    async with SimulatedKubelet(cluster.kubeconfig, nodes):
        status = await converged(client, "5/5")
        assert "debian12 1/1" in conditions(status)["DriverReady"]["message"]
        assert "gpuctrl-driver-debian12" in await daemonsets(client, NAMESPACE)
    # The node is gone with its kubelet: its pods are deleted at once, as the pod garbage
    # collector would after its 40 s quarantine (a later test must not wait on them).
    for pod in await client.list(PODS, NAMESPACE, field_selector="spec.nodeName=deb-0"):
        path = PODS.path(NAMESPACE, pod["metadata"]["name"])
        with contextlib.suppress(NotFound):
            await client.request("DELETE", path, body={"gracePeriodSeconds": 0})

    async def pruned() -> None:
        assert set(await daemonsets(client, NAMESPACE)) == DRIVERS | AGENTS

    await eventually(pruned, within=30)
    await converged(client)


@pytest.mark.parametrize(
    ("section", "component", "condition"),
    [
        ("devicePlugin", "device-plugin", "DevicePluginReady"),
        ("gfd", "gpu-feature-discovery", "GFDReady"),
        ("dcgmExporter", "dcgm-exporter", "DCGMExporterReady"),
    ],
)
async def test_disabled_operand_is_removed_with_its_labels_and_comes_back(
    operator: Running, client: Client, section: str, component: str, condition: str
) -> None:
    label = f"nvidia.com/gpu.deploy.{component}"
    await patch_policy(client, {section: {"enabled": False}})

    async def removed() -> None:
        assert f"gpuctrl-{component}" not in await daemonsets(client, NAMESPACE)
        nodes = await client.list(NODES, label_selector=label)
        assert nodes == []
        found = conditions(await status_of(client, POLICY))[condition]
        assert (found["status"], found["reason"]) == ("True", "Disabled")

    await eventually(removed, within=30)
    await converged(client)
    await patch_policy(client, {section: {"enabled": True}})
    status = await converged(client)
    assert conditions(status)[condition]["reason"] == "Reconciled"
    assert status["readyNodes"] == "4/4"  # its pods are counted again
    assert len(await client.list(NODES, label_selector=f"{label}=true")) == 4


SERVICES = Resource("v1", "Service", "services")
METRICS = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"


async def exporter_env(client: Client) -> dict[str, str]:
    """The env of the DCGM exporter's container, as its DaemonSet has it."""
    ds = (await daemonsets(client, NAMESPACE))["gpuctrl-dcgm-exporter"]
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


async def test_the_standalone_dcgm_runs_behind_a_node_local_service_for_the_exporter(
    operator: Running, client: Client
) -> None:
    label = "nvidia.com/gpu.deploy.dcgm"
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in await exporter_env(client)  # off by default
    await patch_policy(client, {"dcgm": {"enabled": True}})
    status = await converged(client)
    found = conditions(status)["DCGMReady"]
    assert (found["reason"], found["message"]) == ("Reconciled", "dcgm: 4/4 nodes ready")
    assert "gpuctrl-dcgm" in await daemonsets(client, NAMESPACE)
    service = await client.get(SERVICES, "gpuctrl-dcgm", NAMESPACE)
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    assert service["spec"]["ports"][0]["port"] == 5555
    assert (await exporter_env(client))["DCGM_REMOTE_HOSTENGINE_INFO"] == "gpuctrl-dcgm:5555"
    assert len(await client.list(NODES, label_selector=f"{label}=true")) == 4
    exporter = await client.get(SERVICES, "gpuctrl-dcgm-exporter", NAMESPACE)
    assert exporter["spec"]["internalTrafficPolicy"] == "Local"
    await patch_policy(client, {"dcgm": None})

    async def removed() -> None:
        assert "gpuctrl-dcgm" not in await daemonsets(client, NAMESPACE)
        services = await client.list(SERVICES, NAMESPACE)
        assert "gpuctrl-dcgm" not in {s["metadata"]["name"] for s in services}
        assert await client.list(NODES, label_selector=label) == []
        assert "DCGM_REMOTE_HOSTENGINE_INFO" not in await exporter_env(client)

    await eventually(removed, within=30)
    await converged(client)


async def test_the_node_status_exporter_is_deployed_counted_and_removed(
    operator: Running, client: Client
) -> None:
    label = "nvidia.com/gpu.deploy.node-status-exporter"
    found = conditions(await status_of(client, POLICY))["NodeStatusExporterReady"]
    assert (found["status"], found["reason"]) == ("True", "Disabled")  # off by default
    await patch_policy(client, {"nodeStatusExporter": {"enabled": True}})
    status = await converged(client)
    found = conditions(status)["NodeStatusExporterReady"]
    assert (found["reason"], found["message"]) == (
        "Reconciled",
        "node-status-exporter: 4/4 nodes ready",
    )
    assert status["readyNodes"] == "4/4"  # its pods counted with the others'
    assert len(await client.list(NODES, label_selector=f"{label}=true")) == 4
    service = await client.get(SERVICES, "gpuctrl-node-status-exporter", NAMESPACE)
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    await patch_policy(client, {"nodeStatusExporter": None})

    async def removed() -> None:
        assert "gpuctrl-node-status-exporter" not in await daemonsets(client, NAMESPACE)
        services = await client.list(SERVICES, NAMESPACE)
        assert "gpuctrl-node-status-exporter" not in {s["metadata"]["name"] for s in services}
        assert await client.list(NODES, label_selector=label) == []

    await eventually(removed, within=30)
    await converged(client)


async def test_custom_metrics_roll_the_exporter_and_a_bad_edit_keeps_the_last_good_file(
    operator: Running, client: Client
) -> None:
    user = {"metadata": {"name": "my-metrics", "namespace": NAMESPACE}}
    await client.create(CONFIG_MAPS, {**user, "data": {"dcgm-metrics.csv": METRICS}})
    await patch_policy(client, {"dcgmExporter": {"config": {"name": "my-metrics"}}})
    await converged(client)
    copy = await client.get(CONFIG_MAPS, "gpuctrl-dcgm-exporter-metrics", NAMESPACE)
    assert copy["data"] == {"dcgm-metrics.csv": METRICS}
    env = await exporter_env(client)
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    ds = (await daemonsets(client, NAMESPACE))["gpuctrl-dcgm-exporter"]
    good = ds["spec"]["template"]["metadata"]["annotations"]["gpuctrl.io/config-hash"]
    bad = METRICS + "DCGM_FI_DEV_POWER_USAGE, gauges, power\n"
    await client.merge_patch(
        CONFIG_MAPS, "my-metrics", {"data": {"dcgm-metrics.csv": bad}}, NAMESPACE
    )

    async def refused() -> None:
        found = conditions(await status_of(client, POLICY))["DCGMExporterReady"]
        assert (found["status"], found["reason"]) == ("False", "InvalidSpec")
        assert "line 2: 'gauges' is not a metric type" in found["message"]

    await eventually(refused, within=30)
    copy = await client.get(CONFIG_MAPS, "gpuctrl-dcgm-exporter-metrics", NAMESPACE)
    assert copy["data"] == {"dcgm-metrics.csv": METRICS}  # the last good file, for every pod
    ds = (await daemonsets(client, NAMESPACE))["gpuctrl-dcgm-exporter"]
    assert ds["spec"]["template"]["metadata"]["annotations"]["gpuctrl.io/config-hash"] == good
    await patch_policy(client, {"dcgmExporter": {"config": None}})
    await converged(client)
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAPS, "gpuctrl-dcgm-exporter-metrics", NAMESPACE)
    assert "my-metrics" in {
        c["metadata"]["name"] for c in await client.list(CONFIG_MAPS, NAMESPACE)
    }
    await client.delete(CONFIG_MAPS, "my-metrics", NAMESPACE)
    env = await exporter_env(client)
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcp-metrics-included.csv"


CRDS = Resource(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
SERVICE_MONITORS = Resource("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors")
SERVICE_MONITOR_CRD = Path(__file__).parents[2] / "data/prometheus/servicemonitors-crd.yaml"


async def test_the_service_monitor_waits_for_its_crd_and_goes_when_turned_off(
    operator: Running, client: Client
) -> None:
    monitor = {"enabled": True, "interval": "30s", "additionalLabels": {"release": "prom"}}
    await patch_policy(client, {"dcgmExporter": {"serviceMonitor": monitor}})

    async def missing() -> None:
        found = conditions(await status_of(client, POLICY))["DCGMExporterReady"]
        assert (found["status"], found["reason"]) == ("False", "MissingCRD"), found
        assert "servicemonitors.monitoring.coreos.com is not installed" in found["message"]

    await eventually(missing, within=30)
    assert "gpuctrl-dcgm-exporter" in await daemonsets(client, NAMESPACE)  # runs regardless
    crd = yaml.safe_load(SERVICE_MONITOR_CRD.read_text())
    await client.create(CRDS, crd)
    try:
        await converged(client)  # the CRD established: the ServiceMonitor is made
        made = await client.get(SERVICE_MONITORS, "gpuctrl-dcgm-exporter", NAMESPACE)
        assert made["metadata"]["labels"]["release"] == "prom"
        assert made["spec"]["endpoints"][0]["interval"] == "30s"
        assert made["metadata"]["ownerReferences"][0]["name"] == POLICY
        service = await client.get(SERVICES, "gpuctrl-dcgm-exporter", NAMESPACE)
        selected = made["spec"]["selector"]["matchLabels"].items()
        assert selected <= service["metadata"]["labels"].items()
        await patch_policy(client, {"dcgmExporter": {"serviceMonitor": None}})

        async def pruned() -> None:
            assert await client.list(SERVICE_MONITORS, NAMESPACE) == []

        await eventually(pruned, within=30)
        await converged(client)
    finally:
        await client.delete(CRDS, crd["metadata"]["name"])


async def test_a_second_policy_is_ignored(operator: Running, client: Client) -> None:
    await client.create(POLICIES, policy("second"))
    try:

        async def ignored() -> None:
            status = await status_of(client, "second")
            assert status.get("state") == "ignored", status
            ready = conditions(status)["Ready"]
            assert (ready["status"], ready["reason"]) == ("False", "Ignored")
            assert "'cluster' is honoured" in ready["message"]

        await eventually(ignored, within=20)
        for ds in (await daemonsets(client, NAMESPACE)).values():
            assert [o["name"] for o in ds["metadata"]["ownerReferences"]] == [POLICY]
        await converged(client)
    finally:
        await client.delete(POLICIES, "second")


async def test_an_invalid_spec_is_reported_and_changes_nothing(
    operator: Running, client: Client
) -> None:
    await converged(client)
    before = await daemonsets(client, NAMESPACE)
    await patch_policy(client, {"daemonsets": {"labels": {"not a label!": "x"}}})

    async def reported() -> dict[str, Any]:
        status = await status_of(client, POLICY)
        ready = conditions(status)["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), ready
        assert "spec.daemonsets.labels" in ready["message"]
        assert status["state"] == "notReady"
        # No part reports itself fine for a spec that is not (issue 23).
        generation = (await client.get(POLICIES, POLICY))["metadata"]["generation"]
        for name, found in conditions(status).items():
            if name != "Ready":
                assert (found["status"], found["reason"]) == ("Unknown", "InvalidSpec"), found
                assert found["observedGeneration"] == generation, found
        return status

    await eventually(reported, within=20)

    async def warned() -> None:
        events = await policy_events(client)
        assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning" for e in events)

    await eventually(warned, within=10)
    await asyncio.sleep(2)
    after = await daemonsets(client, NAMESPACE)
    assert {n: d["metadata"]["generation"] for n, d in after.items()} == {
        n: d["metadata"]["generation"] for n, d in before.items()
    }
    await patch_policy(client, {"daemonsets": {"labels": None}})
    await converged(client)


async def test_an_apply_the_apiserver_refuses_reaches_the_conditions_and_events(
    operator: Running, client: Client
) -> None:
    """Issue 25: an affinity the schema lets through (it preserves unknown fields) but the
    apiserver refuses in every DaemonSet is named on each operand's condition and in a
    Warning Event, for the current generation; fixing it converges again."""
    await converged(client)
    await patch_policy(client, {"daemonsets": {"affinity": {"nodeAffinity": "everywhere"}}})

    async def reported() -> None:
        obj = await client.get(POLICIES, POLICY)
        toolkit = conditions(obj["status"])["ToolkitReady"]
        assert (toolkit["status"], toolkit["reason"]) == ("False", "ApplyFailed"), toolkit
        assert "the apiserver refused DaemonSet gpuctrl/gpuctrl-toolkit" in toolkit["message"]
        assert toolkit["observedGeneration"] == obj["metadata"]["generation"]
        assert obj["status"]["state"] == "notReady"

    await eventually(reported, within=30)
    events = await policy_events(client)
    assert any(e["reason"] == "ApplyFailed" and e["type"] == "Warning" for e in events)
    await patch_policy(client, {"daemonsets": {"affinity": None}})
    await converged(client)


async def test_a_missing_configmap_is_named_and_the_driver_keeps_running(
    operator: Running, client: Client
) -> None:
    before = await daemonsets(client, NAMESPACE)
    await patch_policy(client, {"driver": {"repoConfig": {"configMapName": "repo-list"}}})

    async def named() -> None:
        found = conditions(await status_of(client, POLICY))["DriverReady"]
        assert (found["status"], found["reason"]) == ("False", "MissingConfigMap"), found
        assert "'repo-list'" in found["message"]

    await eventually(named, within=20)
    after = await daemonsets(client, NAMESPACE)
    for name in DRIVERS:
        assert after[name]["metadata"]["generation"] == before[name]["metadata"]["generation"]
    repo = {"metadata": {"name": "repo-list", "namespace": NAMESPACE}, "data": GOOD_REPOS}
    await client.create(CONFIG_MAPS, repo)
    await converged(client)
    after = await daemonsets(client, NAMESPACE)
    volumes = after["gpuctrl-driver-ubuntu22.04"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "repo-config", "configMap": {"name": "repo-list"}} in [
        {"name": v["name"], "configMap": {"name": v["configMap"]["name"]}}
        for v in volumes
        if "configMap" in v
    ]
    await patch_policy(client, {"driver": {"repoConfig": None}})
    await client.delete(CONFIG_MAPS, "repo-list", NAMESPACE)
    await converged(client)


async def test_repository_errors_are_reported_and_keep_the_last_good_driver(
    operator: Running, client: Client
) -> None:
    await converged(client)
    before = await daemonsets(client, NAMESPACE)
    bad = {**GOOD_REPOS, "mirror.list": "dep http://mirror.example.com/ubuntu jammy main\n"}
    body = {"metadata": {"name": "mirrors", "namespace": NAMESPACE}, "data": bad}
    await client.create(CONFIG_MAPS, body)
    await patch_policy(client, {"driver": {"repoConfig": {"configMapName": "mirrors"}}})

    async def reported() -> None:
        found = conditions(await status_of(client, POLICY))
        repo, driver = found["RepoConfigReady"], found["DriverReady"]
        assert (repo["status"], repo["reason"]) == ("False", "InvalidRepoConfig"), repo
        assert "'mirror.list' line 1" in repo["message"]
        assert (driver["status"], driver["reason"]) == ("False", "InvalidRepoConfig"), driver
        events = await policy_events(client)
        assert any(e["reason"] == "RepoConfigProblem" for e in events)

    await eventually(reported, within=20)
    assert REGISTRY.get_sample_value("gpuctrl_repo_config_problems", {"severity": "error"}) == 1.0
    after = await daemonsets(client, NAMESPACE)
    for name in DRIVERS:
        assert after[name]["metadata"]["generation"] == before[name]["metadata"]["generation"]
    await client.merge_patch(CONFIG_MAPS, "mirrors", {"data": GOOD_REPOS}, NAMESPACE)
    status = await converged(client)
    assert conditions(status)["RepoConfigReady"]["reason"] == "Reconciled"
    after = await daemonsets(client, NAMESPACE)
    for name in DRIVERS:  # the fixed configuration rolled out
        assert after[name]["metadata"]["generation"] > before[name]["metadata"]["generation"]
    await patch_policy(client, {"driver": {"repoConfig": None}})
    await client.delete(CONFIG_MAPS, "mirrors", NAMESPACE)
    await converged(client)


async def test_a_node_that_loses_its_gpu_loses_its_labels(
    operator: Running, client: Client
) -> None:
    nfd = "feature.node.kubernetes.io/pci-10de.present"
    await client.merge_patch(NODES, "gpu-3", {"metadata": {"labels": {nfd: None}}})

    async def unlabelled() -> None:
        labels = (await client.get(NODES, "gpu-3"))["metadata"]["labels"]
        assert labels["nvidia.com/gpu.present"] == "false"
        assert not DEPLOY.keys() & labels.keys()

    await eventually(unlabelled, within=20)
    await converged(client, "3/3")
    await client.merge_patch(NODES, "gpu-3", {"metadata": {"labels": {nfd: "true"}}})
    await converged(client)


async def test_a_gpu_node_without_nfd_os_labels_is_named(operator: Running, client: Client) -> None:
    os_labels = {
        "feature.node.kubernetes.io/system-os_release.ID": "rhel",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "9.4",
    }
    await client.merge_patch(NODES, "gpu-2", {"metadata": {"labels": dict.fromkeys(os_labels)}})

    async def named() -> None:
        status = await status_of(client, POLICY)
        found = conditions(status)["DriverReady"]
        assert (found["status"], found["reason"]) == ("False", "NFDLabelsMissing"), found
        assert "gpu-2" in found["message"]
        assert status["state"] == "notReady"
        assert "gpuctrl-driver-rhel9.4" not in await daemonsets(client, NAMESPACE)

    await eventually(named, within=30)
    await client.merge_patch(NODES, "gpu-2", {"metadata": {"labels": os_labels}})
    await converged(client)


async def test_without_auto_upgrade_the_driver_is_ready_only_on_its_newest_revision(
    operator: Running, client: Client
) -> None:
    # The driver is OnDelete: with autoUpgrade off, nothing replaces its pods but a delete.
    await patch_policy(client, {"driver": {"upgradePolicy": {"autoUpgrade": False}}})
    await converged(client)
    await patch_policy(client, {"driver": {"version": "550.90.07"}})

    async def stale() -> None:
        found = conditions(await status_of(client, POLICY))["DriverReady"]
        assert (found["status"], found["reason"]) == ("False", "OperandNotReady"), found
        assert found["message"].startswith("driver: 0/4 nodes ready")

    await eventually(stale, within=30)
    pods = await client.list(PODS, NAMESPACE, label_selector="app.kubernetes.io/component=driver")
    for pod in pods:
        await client.delete(PODS, pod["metadata"]["name"], NAMESPACE)
    await converged(client)
    await patch_policy(
        client, {"driver": {"upgradePolicy": {"autoUpgrade": None}, "version": None}}
    )
    await converged(client)  # the upgrade controller rolls the drivers back


async def policy_events(client: Client) -> list[dict[str, Any]]:
    """The Events about the policy."""
    return await client.list(EVENTS, "default", field_selector=f"involvedObject.name={POLICY}")


async def test_operand_events_are_recorded(operator: Running, client: Client) -> None:
    events = await policy_events(client)
    messages = {(e["reason"], e["message"]) for e in events}
    assert ("Created", "Created DaemonSet gpuctrl/gpuctrl-toolkit") in messages
    assert ("Deleted", "Deleted DaemonSet gpuctrl/gpuctrl-driver-debian12") in messages
    sources = {e["source"]["component"] for e in events}
    assert {"gpuctrl-driver", "gpuctrl-toolkit", "gpuctrl-policy"} <= sources
    # A DaemonSet the DaemonSet controller has not yet counted is no problem to warn about.
    warnings = [e["message"] for e in events if e["type"] == "Warning"]
    parts = [m for m in warnings if not m.startswith("Ready: ")]  # Ready lists every part
    assert not [m for m in parts if "0/0 nodes ready" in m], parts


async def test_the_manager_runs_the_pod_policy_status_controller(
    operator: Running, client: Client
) -> None:
    pod_policies = Resource("gpuctrl.io/v1alpha1", "PodPolicy", "podpolicies", False)
    body = {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "PodPolicy", "metadata": {"name": "pp"}}
    await client.create(pod_policies, {**body, "spec": {}})

    async def has_status() -> None:
        found = (await client.get(pod_policies, "pp")).get("status") or {}
        assert "Ready" in conditions(found), found

    await eventually(has_status, within=20)
    await client.delete(pod_policies, "pp")


async def ignored_for(client: Client, name: str, honoured: str) -> None:
    status = await status_of(client, name)
    assert status.get("state") == "ignored", status
    assert f"{honoured!r} is honoured" in conditions(status)["Ready"]["message"]


async def test_a_foreground_delete_completes_and_the_next_policy_takes_over(
    operator: Running, client: Client
) -> None:
    """Nothing is applied for a terminating policy, so the garbage collector's foreground
    delete finishes; then the next oldest is honoured and every ignored one says so."""
    for name in ("second", "third"):
        await client.create(POLICIES, policy(name))
    await eventually(lambda: ignored_for(client, "third", POLICY), within=20)
    await client.delete(POLICIES, POLICY, propagation_policy="Foreground")

    async def gone() -> None:
        assert POLICY not in {p["metadata"]["name"] for p in await client.list(POLICIES)}

    await eventually(gone, within=30)
    await eventually(lambda: ignored_for(client, "third", "second"), within=20)
    await client.delete(POLICIES, "third")


async def test_deleting_the_policy_removes_every_operand(operator: Running, client: Client) -> None:
    await client.delete(POLICIES, "second")

    async def cleaned() -> None:
        assert await daemonsets(client, NAMESPACE) == {}
        accounts = await client.list(SERVICE_ACCOUNTS, NAMESPACE, label_selector=MANAGED)
        assert accounts == []
        assert await client.list(RUNTIME_CLASSES, label_selector=MANAGED) == []

    await eventually(cleaned, within=60)
