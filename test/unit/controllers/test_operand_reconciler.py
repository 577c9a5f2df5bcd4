"""The operand reconciler (`controllers._operand.OperandReconciler`) against a hand-filled
cache: what it applies, what it prunes, the condition it writes, and what it leaves alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from operands_kit import EVERY_OPERAND_ENABLED
from reconcile_kit import (
    NAMESPACE,
    POLICY_UID,
    HandFilledCache,
    StatusRecord,
    Writes,
    cluster_policy,
    gpu_node,
)

from api.v1alpha1 import SERVICE_MONITOR_CRD
from controllers._apply import APPLIED_HASH
from controllers._kinds import DAEMON_SETS
from controllers._operand import OperandReconciler
from controllers._reads import cached
from controllers.dcgmexporter import DCGM_EXPORTER
from controllers.deviceplugin import DEVICE_PLUGIN
from controllers.driver import DRIVER
from controllers.operands import OPERANDS
from controllers.toolkit import TOOLKIT
from gpuctrl.runtime import Conflict, Invalid, Request

REQUEST = Request("", "cluster")


def reconciler(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord, operand: Any = DEVICE_PLUGIN
) -> OperandReconciler:
    return OperandReconciler(cluster.cache, writes, NAMESPACE, operand, status)  # type: ignore[arg-type]


def converge(cluster: HandFilledCache, writes: Writes, *, ready: bool) -> None:
    """Put what was applied into the cache as the apiserver stores it; DaemonSets with the
    DaemonSet controller's counts (all nodes ready, or none)."""
    for _, obj in writes.applied:
        stored = copy.deepcopy(obj)
        stored["metadata"]["generation"] = 1
        if stored["kind"] == "DaemonSet":
            count = 2 if ready else 0
            stored["status"] = {
                "observedGeneration": 1,
                "desiredNumberScheduled": 2,
                "updatedNumberScheduled": 2,
                "numberAvailable": count,
            }
        cluster.put(stored)
    writes.applied.clear()


@pytest.fixture
def two_nodes(cluster: HandFilledCache) -> HandFilledCache:
    policy = cluster_policy(EVERY_OPERAND_ENABLED)
    cluster.put(policy, gpu_node("gpu-a"), gpu_node("gpu-b", version="24.04"))
    return cluster


@pytest.mark.parametrize("operand", OPERANDS, ids=lambda o: o.component)
async def test_a_new_cluster_gets_every_object_applied_as_the_operand_owned_by_the_policy(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord, operand: Any
) -> None:
    await reconciler(two_nodes, writes, status, operand)(REQUEST)
    assert writes.applied
    assert {manager for manager, _ in writes.applied} == {f"gpuctrl-{operand.component}"}
    for _, obj in writes.applied:
        meta = obj["metadata"]
        [owner] = meta["ownerReferences"]
        assert (owner["uid"], owner["controller"]) == (POLICY_UID, True)
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "gpuctrl"
        assert APPLIED_HASH in meta["annotations"]
    assert not writes.deleted
    created = [reason for kind, reason, _ in status.events if kind == "Normal"]
    assert created == ["Created"] * len(writes.applied)
    # The DaemonSets are not in the cache yet: pending, and no Warning for it.
    assert status.status_of(operand.condition) == ("False", "DaemonSetPending")
    assert status.quiet[operand.condition]


async def test_a_converged_cluster_gets_no_write_and_a_true_condition(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    reconcile = reconciler(two_nodes, writes, status)
    await reconcile(REQUEST)
    converge(two_nodes, writes, ready=False)
    await reconcile(REQUEST)
    assert writes.count == 0
    assert status.status_of("DevicePluginReady") == ("False", "OperandNotReady")
    assert "device-plugin: 0/2 nodes ready" in status.conditions["DevicePluginReady"]["message"]
    two_nodes.put(_ready(_cached_daemonset(two_nodes)))
    await reconcile(REQUEST)
    assert writes.count == 0
    assert status.status_of("DevicePluginReady") == ("True", "Reconciled")


def _cached_daemonset(cluster: HandFilledCache) -> dict[str, Any]:
    found = cached(cluster.cache, DAEMON_SETS, NAMESPACE, "gpuctrl-device-plugin", NAMESPACE)
    assert found is not None
    return found


def _ready(ds: dict[str, Any]) -> dict[str, Any]:
    ds = copy.deepcopy(ds)
    ds["status"]["numberAvailable"] = ds["status"]["desiredNumberScheduled"]
    return ds


async def test_a_field_someone_edited_is_applied_again(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    reconcile = reconciler(two_nodes, writes, status)
    await reconcile(REQUEST)
    converge(two_nodes, writes, ready=True)
    edited = _cached_daemonset(two_nodes)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:1"
    two_nodes.put(edited)
    await reconcile(REQUEST)
    assert [obj["metadata"]["name"] for _, obj in writes.applied] == ["gpuctrl-device-plugin"]
    assert [reason for _, reason, _ in status.events[-1:]] == ["Updated"]


def _earlier_release(ds: dict[str, Any]) -> dict[str, Any]:
    """``ds`` as an earlier gpuctrl made it: selecting its pods by ``app=<its name>``."""
    ds = copy.deepcopy(ds)
    ds["metadata"]["uid"] = "earlier"
    ds["metadata"]["annotations"][APPLIED_HASH] = "earlier"
    ds["spec"]["selector"] = {"matchLabels": {"app": "gpuctrl-device-plugin"}}
    return ds


async def test_a_daemonset_with_an_earlier_selector_is_deleted_with_its_pods_orphaned(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    reconcile = reconciler(two_nodes, writes, status)
    await reconcile(REQUEST)
    converge(two_nodes, writes, ready=True)
    two_nodes.put(_earlier_release(_cached_daemonset(two_nodes)))
    await reconcile(REQUEST)
    assert writes.applied == []  # a selector never changes in place
    assert writes.deleted == [("DaemonSet", NAMESPACE, "gpuctrl-device-plugin")]
    assert writes.delete_options == [{"propagation_policy": "Orphan", "uid": "earlier"}]
    assert status.events[-1][1] == "Replacing"
    deleting = _earlier_release(_cached_daemonset(two_nodes))
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    two_nodes.put(deleting)
    await reconcile(REQUEST)  # the garbage collector orphans its pods: nothing to do yet
    assert (len(writes.applied), len(writes.deleted)) == (0, 1)


def _plugin_pod(name: str, generation: str, owner: bool = False) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/managed-by": "gpuctrl",
        "app.kubernetes.io/component": "device-plugin",
        "pod-template-generation": generation,
    }
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels}
    if owner:
        meta["ownerReferences"] = [
            {"kind": "DaemonSet", "name": "x", "uid": "u", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


@pytest.mark.parametrize(
    ("pods", "generation"),
    [
        pytest.param([], None, id="no-pods"),
        pytest.param([("a", "3", False), ("b", "7", False)], "8", id="orphans"),
        pytest.param([("a", "3", True)], None, id="owned"),
        pytest.param([("a", "x", False)], None, id="not-a-number"),
    ],
)
async def test_a_daemonset_made_over_orphaned_pods_continues_their_template_generation(
    two_nodes: HandFilledCache,
    writes: Writes,
    status: StatusRecord,
    pods: list[tuple[str, str, bool]],
    generation: str | None,
) -> None:
    for name, number, owned in pods:
        writes.stored[("Pod", NAMESPACE, name)] = _plugin_pod(name, number, owned)
    await reconciler(two_nodes, writes, status)(REQUEST)
    [ds] = [obj for _, obj in writes.applied if obj["kind"] == "DaemonSet"]
    annotations = ds["metadata"]["annotations"]
    assert annotations.get("deprecated.daemonset.template.generation") == generation
    converge(two_nodes, writes, ready=True)
    await reconciler(two_nodes, writes, status)(REQUEST)
    assert writes.applied == []  # the annotation is no part of what is compared


async def test_a_request_for_a_policy_that_is_not_honoured_does_nothing(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    two_nodes.put(cluster_policy(name="younger", created="2026-02-01T00:00:00Z"))
    await reconciler(two_nodes, writes, status)(Request("", "younger"))
    assert writes.count == 0
    assert not status.conditions
    assert not status.events


async def test_an_invalid_spec_keeps_every_object_and_says_unknown(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    cluster.put(cluster_policy({"devicePlugin": {"enabled": "sometimes"}}), gpu_node("gpu-a"))
    await reconciler(cluster, writes, status)(REQUEST)
    assert writes.count == 0
    assert status.status_of("DevicePluginReady") == ("Unknown", "InvalidSpec")


async def test_a_missing_config_map_keeps_every_object(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    spec = {"driver": {"repoConfig": {"configMapName": "site-repos"}}}
    cluster.put(cluster_policy(spec), gpu_node("gpu-a"))
    await reconciler(cluster, writes, status, DRIVER)(REQUEST)
    assert writes.count == 0
    found, reason = status.status_of("DriverReady")
    assert (found, reason) == ("False", "MissingConfigMap")
    assert "site-repos" in status.conditions["DriverReady"]["message"]


async def test_a_disabled_operand_deletes_what_it_made_and_says_disabled(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    reconcile = reconciler(two_nodes, writes, status)
    await reconcile(REQUEST)
    made = {(o["kind"], o["metadata"]["name"]) for _, o in writes.applied}
    converge(two_nodes, writes, ready=True)
    two_nodes.put(cluster_policy({"devicePlugin": {"enabled": False}}, generation=2))
    await reconcile(REQUEST)
    assert not writes.applied
    assert {(kind, name) for kind, _, name in writes.deleted} == made
    assert status.status_of("DevicePluginReady") == ("True", "Disabled")


async def test_no_gpu_nodes_is_ready_with_nothing_to_run(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    cluster.put(cluster_policy())
    await reconciler(cluster, writes, status, TOOLKIT)(REQUEST)
    assert status.status_of("ToolkitReady") == ("True", "NoGPUNodes")


async def test_gpu_nodes_without_os_labels_get_no_driver_and_are_named(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    cluster.put(cluster_policy(), gpu_node("gpu-a"), gpu_node("gpu-bare", os_id=""))
    await reconciler(cluster, writes, status, DRIVER)(REQUEST)
    assert status.status_of("DriverReady") == ("False", "NFDLabelsMissing")
    assert "gpu-bare" in status.conditions["DriverReady"]["message"]
    daemonsets = [o["metadata"]["name"] for _, o in writes.applied if o["kind"] == "DaemonSet"]
    assert daemonsets == ["gpuctrl-driver-ubuntu22.04"]


async def test_a_refused_apply_is_a_warning_and_a_condition_and_is_retried(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    writes.refuse["DaemonSet", "gpuctrl-device-plugin"] = Invalid(
        422, "Invalid", "spec.template: bad"
    )
    with pytest.raises(Invalid):
        await reconciler(two_nodes, writes, status)(REQUEST)
    assert status.status_of("DevicePluginReady") == ("False", "ApplyFailed")
    [warning] = [e for e in status.events if e[0] == "Warning"]
    assert warning[1] == "ApplyFailed"
    assert "DaemonSet gpuctrl/gpuctrl-device-plugin" in warning[2]


async def test_a_lost_race_is_retried_without_a_word(
    two_nodes: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    writes.refuse["DaemonSet", "gpuctrl-device-plugin"] = Conflict(
        409, "Conflict", "the object changed"
    )
    with pytest.raises(Conflict):
        await reconciler(two_nodes, writes, status)(REQUEST)
    assert "DevicePluginReady" not in status.conditions
    assert all(kind == "Normal" for kind, _, _ in status.events)


MANAGED = {"app.kubernetes.io/managed-by": "gpuctrl"}
COMPONENTS = [o.component for o in OPERANDS]


@st.composite
def stray_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A ConfigMap or DaemonSet the render does not produce, with any mix of gpuctrl's labels
    and owner references (to the policy, to another, controller or not)."""
    labels: dict[str, str] = {}
    if draw(st.booleans()):
        labels |= MANAGED
    if draw(st.booleans()):
        labels["app.kubernetes.io/component"] = draw(st.sampled_from(COMPONENTS))
    refs = [
        {
            "apiVersion": "gpuctrl.io/v1alpha1",
            "kind": "ClusterPolicy",
            "name": "cluster",
            "uid": draw(st.sampled_from([POLICY_UID, "other-uid"])),
            "controller": draw(st.booleans()),
        }
        for _ in range(draw(st.integers(0, 2)))
    ]
    kind = draw(st.sampled_from(["ConfigMap", "DaemonSet"]))
    name = draw(st.from_regex(r"stray-[a-z0-9]{1,8}", fullmatch=True))
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels}
    if refs:
        meta["ownerReferences"] = refs
    api_version = "v1" if kind == "ConfigMap" else "apps/v1"
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def _made_for_the_policy_by(obj: dict[str, Any], component: str) -> bool:
    meta = obj["metadata"]
    labels = meta["labels"]
    return (
        labels.get("app.kubernetes.io/managed-by") == "gpuctrl"
        and labels.get("app.kubernetes.io/component") == component
        and any(r["uid"] == POLICY_UID and r["controller"] for r in meta.get("ownerReferences", ()))
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(strays=st.lists(stray_objects(), max_size=6, unique_by=lambda o: o["metadata"]["name"]))
async def test_only_what_the_operand_made_for_the_policy_is_ever_deleted(
    cluster: HandFilledCache, strays: list[dict[str, Any]]
) -> None:
    writes, status = Writes(), StatusRecord()
    cluster.put(cluster_policy(), gpu_node("gpu-a"))
    cluster.put(*copy.deepcopy(strays))
    try:
        await reconciler(cluster, writes, status)(REQUEST)
    finally:
        cluster.remove(*strays)
    expected = {
        (o["kind"], o["metadata"]["name"])
        for o in strays
        if _made_for_the_policy_by(o, "device-plugin")
    }
    assert {(kind, name) for kind, _, name in writes.deleted} == expected


def _service_monitor_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": SERVICE_MONITOR_CRD},
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


async def test_the_service_monitor_is_read_written_and_pruned_through_the_apiserver(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    monitored = {"dcgmExporter": {"serviceMonitor": {"enabled": True, "interval": "30s"}}}
    cluster.put(cluster_policy(monitored), gpu_node("gpu-a"))
    reconcile = reconciler(cluster, writes, status, DCGM_EXPORTER)
    await reconcile(REQUEST)  # no CRD: everything else is applied, and the condition says why
    assert "ServiceMonitor" not in {obj["kind"] for _, obj in writes.applied}
    assert writes.applied
    assert status.status_of("DCGMExporterReady") == ("False", "MissingCRD")
    assert SERVICE_MONITOR_CRD in status.conditions["DCGMExporterReady"]["message"]
    converge(cluster, writes, ready=True)
    cluster.put(_service_monitor_crd())
    await reconcile(REQUEST)
    [(_, monitor)] = writes.applied
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["endpoints"] == [
        {"port": "gpu-metrics", "path": "/metrics", "interval": "30s"}
    ]
    assert status.status_of("DCGMExporterReady") == ("True", "Reconciled")
    # Stored as applied: read back, equal, not applied again.
    writes.stored["ServiceMonitor", NAMESPACE, monitor["metadata"]["name"]] = monitor
    writes.applied.clear()
    await reconcile(REQUEST)
    assert writes.count == 0
    assert writes.reads >= 2  # a get to compare, a list to prune
    # A user's ServiceMonitor with the component's labels (not owned by the policy) is kept.
    foreign = copy.deepcopy(monitor)
    foreign["metadata"] = {**foreign["metadata"], "name": "mine", "ownerReferences": []}
    writes.stored["ServiceMonitor", NAMESPACE, "mine"] = foreign
    cluster.put(cluster_policy({"dcgmExporter": {"serviceMonitor": {"enabled": False}}}))
    await reconcile(REQUEST)
    assert writes.deleted == [("ServiceMonitor", NAMESPACE, "gpuctrl-dcgm-exporter")]
    assert status.status_of("DCGMExporterReady") == ("True", "Reconciled")


async def test_without_the_crd_nothing_is_listed_for_the_service_monitor(
    cluster: HandFilledCache, writes: Writes, status: StatusRecord
) -> None:
    cluster.put(cluster_policy(), gpu_node("gpu-a"))
    reconcile = reconciler(cluster, writes, status, DCGM_EXPORTER)
    await reconcile(REQUEST)
    converge(cluster, writes, ready=True)
    writes.reads = 0  # making the DaemonSet read its pods (`test_a_daemonset_made_over_...`)
    await reconcile(REQUEST)
    assert (writes.count, writes.reads) == (0, 0)  # a cluster without the CRD costs no request
