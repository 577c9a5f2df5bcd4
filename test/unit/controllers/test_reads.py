"""What the controllers read of the cache (`controllers._reads`) and which policy they honour
(`controllers._honoured`): which Node events change a render, and the Node states that stand in
for thousands of Nodes."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1 import SERVICE_MONITOR_CRD, load_cluster_policy
from controllers._honoured import honoured, to_honoured
from controllers._kinds import (
    CLUSTER_POLICIES,
    CLUSTER_ROLES,
    CONFIG_MAPS,
    CRDS,
    DAEMON_SETS,
    MANAGED_SELECTOR,
    NODES,
    PODS,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
)
from controllers._reads import (
    TRANSFORMS,
    cached,
    cached_list,
    cluster_facts,
    informer,
    informers,
    node_role_changed,
    node_states,
    owned_objects,
    prunable,
    ready_components,
)
from controllers.render import ClusterFacts, render
from controllers.render._facts import crd_served
from gpuctrl.runtime import Cache, Event, Request, freeze

NFD = "feature.node.kubernetes.io"
GPU = f"{NFD}/pci-10de.present"
OS_ID = f"{NFD}/system-os_release.ID"
OS_VERSION = f"{NFD}/system-os_release.VERSION_ID"
PRESENT = "nvidia.com/gpu.present"
DRIVER = "nvidia.com/gpu.deploy.driver"


def node(name: str, rv: str = "1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": rv, "labels": labels},
    }


UBUNTU = {GPU: "true", OS_ID: "ubuntu", OS_VERSION: "22.04"}


@pytest.mark.parametrize(
    ("old", "new", "passes"),
    [
        pytest.param(
            UBUNTU, {**UBUNTU, DRIVER: "true", PRESENT: "true"}, False, id="deploy-labels"
        ),
        pytest.param(UBUNTU, {**UBUNTU, "team": "a"}, False, id="unrelated-label"),
        pytest.param(UBUNTU, {**UBUNTU, OS_VERSION: "24.04"}, True, id="os-upgraded"),
        pytest.param(UBUNTU, {OS_ID: "ubuntu", OS_VERSION: "22.04"}, True, id="gpu-gone"),
        pytest.param({}, {PRESENT: "true"}, True, id="marked-by-nvidia"),
        pytest.param(UBUNTU, {**UBUNTU, OS_ID: "ubuntu"}, False, id="same-values"),
        pytest.param({GPU: "false"}, {GPU: "true"}, True, id="gpu-label-turns-true"),
        pytest.param({GPU: "false"}, {}, False, id="false-label-removed"),
    ],
)
def test_node_role_changed_on_updates(
    old: dict[str, str], new: dict[str, str], passes: bool
) -> None:
    event = Event("update", freeze(node("n", "2", **new)), freeze(node("n", "1", **old)))
    assert node_role_changed(event) is passes


@pytest.mark.parametrize("kind", ["add", "delete"])
def test_node_role_changed_passes_adds_and_deletes(kind: Any) -> None:
    assert node_role_changed(Event(kind, freeze(node("n", **UBUNTU))))


def test_node_role_changed_passes_resyncs() -> None:
    same = freeze(node("n", **UBUNTU))
    assert node_role_changed(Event("update", same, same))  # as every runtime predicate does


NODES_OF_A_CLUSTER = [
    node("gpu-b", **UBUNTU, **{PRESENT: "true", DRIVER: "true"}),
    node("gpu-a", **UBUNTU),
    node("gpu-c", **{GPU: "true", OS_ID: "rhel", OS_VERSION: "9.4", "team": "x"}),
    node("gpu-no-os", **{GPU: "true"}),
    node("cpu", **{OS_ID: "ubuntu", OS_VERSION: "22.04", "kubernetes.io/hostname": "cpu"}),
]


async def test_node_states_group_nodes_by_the_labels_read(cache: Cache) -> None:
    nodes = informer(cache, NODES, "gpuctrl")
    nodes.replace(dict(n) for n in NODES_OF_A_CLUSTER)
    states = node_states(cache, "gpuctrl")
    found = {tuple(sorted(labels.items())): sorted(names) for labels, names in states}
    assert found[tuple(sorted(UBUNTU.items()))] == ["gpu-a"]
    assert {name for names in found.values() for name in names} == {
        n["metadata"]["name"] for n in NODES_OF_A_CLUSTER
    }
    assert all("team" not in dict(k) and "kubernetes.io/hostname" not in dict(k) for k in found)
    nodes.apply("MODIFIED", node("gpu-a", "2", **UBUNTU, **{PRESENT: "true", DRIVER: "true"}))
    nodes.apply("DELETED", node("gpu-no-os", "2"))
    regrouped = [sorted(names) for _, names in node_states(cache, "gpuctrl")]
    assert ["gpu-a", "gpu-b"] in regrouped
    assert "gpu-no-os" not in {name for names in regrouped for name in names}


def service_monitor_crd(*conditions: tuple[str, str], deleting: bool = False) -> dict[str, Any]:
    """The Prometheus Operator's ServiceMonitor CRD as the apiserver sends it (in part)."""
    meta: dict[str, Any] = {"name": SERVICE_MONITOR_CRD, "uid": "u", "resourceVersion": "7"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {**meta, "annotations": {"big": "x" * 1000}, "managedFields": [{}]},
        "spec": {"group": "monitoring.coreos.com", "versions": [{"name": "v1"}]},
        "status": {
            "conditions": [
                {"type": t, "status": v, "reason": "r", "message": "m"} for t, v in conditions
            ]
        },
    }


async def test_cluster_facts_render_as_the_full_nodes_do(cache: Cache) -> None:
    crd = service_monitor_crd(("NamesAccepted", "True"), ("Established", "True"))
    informer(cache, NODES, "gpuctrl").replace(dict(n) for n in NODES_OF_A_CLUSTER)
    informer(cache, CONFIG_MAPS, "gpuctrl").replace([])
    informer(cache, CRDS, "gpuctrl").replace([dict(crd)])
    from_cache = cluster_facts(cache, "gpuctrl")
    full = ClusterFacts.from_objects("gpuctrl", NODES_OF_A_CLUSTER, [], [crd])
    policy = load_cluster_policy({"spec": {"dcgmExporter": {"serviceMonitor": {"enabled": True}}}})
    assert from_cache.crds == {SERVICE_MONITOR_CRD}
    assert "ServiceMonitor" in {o["kind"] for o in render(policy, from_cache)}
    assert render(policy, from_cache) == render(policy, full)
    assert [n.name for n in from_cache.gpu_nodes()] == [n.name for n in full.gpu_nodes()]
    assert [n.os for n in from_cache.gpu_nodes()] == [n.os for n in full.gpu_nodes()]


def test_nodes_are_cached_with_the_labels_read_only() -> None:
    raw = node("gpu-a", **UBUNTU, **{DRIVER: "true", "team": "x"})
    raw["metadata"] |= {"annotations": {"big": "x" * 1000}, "managedFields": [{}], "uid": "u"}
    cached = TRANSFORMS[NODES](raw)
    assert cached["metadata"] == {
        "name": "gpu-a",
        "uid": "u",
        "resourceVersion": "1",
        "labels": {**UBUNTU, DRIVER: "true"},
    }
    assert (cached["apiVersion"], cached["kind"]) == ("v1", "Node")


@pytest.mark.parametrize(
    ("crd", "served"),
    [
        pytest.param(service_monitor_crd(("Established", "True")), True, id="established"),
        pytest.param(service_monitor_crd(("Established", "False")), False, id="not-yet"),
        pytest.param(service_monitor_crd(), False, id="no-status"),
        pytest.param(
            service_monitor_crd(("Established", "True"), deleting=True), False, id="terminating"
        ),
    ],
)
def test_a_crd_is_cached_trimmed_and_served_only_while_established_and_not_deleted(
    crd: dict[str, Any], served: bool
) -> None:
    trimmed = TRANSFORMS[CRDS](crd)
    assert set(trimmed["metadata"]) <= {"name", "uid", "resourceVersion", "deletionTimestamp"}
    assert "spec" not in trimmed
    assert all(set(c) == {"type", "status"} for c in trimmed["status"]["conditions"])
    assert crd_served(trimmed) is crd_served(crd) is served
    facts = ClusterFacts.from_objects("gpuctrl", [], [], [trimmed])
    assert (SERVICE_MONITOR_CRD in facts.crds) is served


def cluster_policy(name: str, created: str | None, rv: str = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy", "metadata": meta}


async def test_the_oldest_policy_is_honoured_and_mapped_to(cache: Cache) -> None:
    policies = informer(cache, CLUSTER_POLICIES, "gpuctrl")
    policies.replace([])
    mapper = to_honoured(cache)
    assert honoured(cache) is None
    assert list(mapper({})) == []
    policies.replace(
        [
            cluster_policy("young", "2026-02-01T00:00:00Z"),
            cluster_policy("b-old", "2026-01-01T00:00:00Z"),
            cluster_policy("a-old", "2026-01-01T00:00:00Z"),  # a tie: the first name wins
            cluster_policy("undated", None),
        ]
    )
    found = honoured(cache)
    assert found is not None
    assert found.name == "a-old"
    assert found.model is not None
    assert list(mapper({})) == [Request("", "a-old")]
    policies.apply("DELETED", cluster_policy("a-old", "2026-01-01T00:00:00Z", "2"))
    policies.apply("DELETED", cluster_policy("b-old", "2026-01-01T00:00:00Z", "2"))
    assert list(mapper({})) == [Request("", "young")]
    policies.apply("DELETED", cluster_policy("young", "2026-02-01T00:00:00Z", "2"))
    assert list(mapper({})) == [Request("", "undated")]


async def test_a_terminating_oldest_policy_is_not_acted_on_nor_replaced(cache: Cache) -> None:
    policies = informer(cache, CLUSTER_POLICIES, "gpuctrl")
    old = cluster_policy("old", "2026-01-01T00:00:00Z")
    policies.replace([old, cluster_policy("new", "2026-02-01T00:00:00Z")])
    terminating = cluster_policy("old", "2026-01-01T00:00:00Z", "2")
    terminating["metadata"]["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    policies.apply("MODIFIED", terminating)
    assert honoured(cache) is None
    assert list(to_honoured(cache)({})) == [Request("", "old")]
    policies.apply("DELETED", terminating)
    found = honoured(cache)
    assert found is not None
    assert found.name == "new"


def pod(name: str, node: str, component: str, ready: str, rv: str = "1") -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "gpuctrl",
            "resourceVersion": rv,
            "labels": {"app.kubernetes.io/component": component},
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
    }


async def test_ready_pods_are_found_by_node_and_component_without_decoding(cache: Cache) -> None:
    pods = informer(cache, PODS, "gpuctrl")
    pods.replace(
        [
            pod("d-a", "a", "driver", "True"),
            pod("d-b", "b", "driver", "False"),
            pod("t-a", "a", "toolkit", "True"),
            pod("t-b", "b", "toolkit", "True"),
        ]
    )
    assert ready_components(cache, "gpuctrl") == {"a": {"driver", "toolkit"}, "b": {"toolkit"}}
    pods.apply("MODIFIED", pod("d-b", "b", "driver", "True", rv="2"))
    pods.apply("DELETED", pod("t-a", "a", "toolkit", "True"))
    assert ready_components(cache, "gpuctrl") == {"a": {"driver"}, "b": {"driver", "toolkit"}}


async def test_namespaced_objects_are_watched_in_the_operand_namespace_and_roles_in_default(
    cache: Cache,
) -> None:
    def count(resource: Any, namespace: str = "gpuctrl") -> int:
        return len(informers(cache, resource, namespace))

    assert count(DAEMON_SETS) == count(SERVICE_ACCOUNTS) == count(CLUSTER_ROLES) == 1
    assert count(ROLES) == count(ROLE_BINDINGS) == 2
    assert count(ROLES, "default") == 1  # one informer when the namespaces are the same
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}
    for one, namespace in zip(
        informers(cache, ROLES, "gpuctrl"), ("gpuctrl", "default"), strict=True
    ):
        one.replace([{**role, "metadata": {"name": "r", "namespace": namespace, "rv": "1"}}])
    found = cached_list(cache, ROLES, "gpuctrl")
    assert sorted(r["metadata"]["namespace"] for r in found) == ["default", "gpuctrl"]
    for namespace in ("gpuctrl", "default"):  # each informer holds its namespace's
        [held] = cache.list(ROLES, namespace, label_selector=MANAGED_SELECTOR)
        assert held["metadata"]["namespace"] == namespace
    assert cached(cache, ROLES, "gpuctrl", "r", "default") is not None
    assert cached(cache, ROLES, "gpuctrl", "r", "kube-system") is None  # not watched there
    assert cached(cache, DAEMON_SETS, "gpuctrl", "d", "default") is None


POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster", "uid": "policy-uid"},
}
GPUCTRL = {"app.kubernetes.io/managed-by": "gpuctrl", "app.kubernetes.io/component": "driver"}


def reference(uid: str = "policy-uid", **fields: Any) -> dict[str, Any]:
    ref = {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy", "name": "cluster"}
    return {**ref, "uid": uid, **fields}


def config_map(name: str, labels: dict[str, str], *refs: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "gpuctrl", "labels": labels}
    if refs:
        meta["ownerReferences"] = list(refs)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


@pytest.mark.parametrize(
    ("labels", "refs", "passes"),
    [
        pytest.param(GPUCTRL, [reference(controller=True)], True, id="made-for-the-policy"),
        pytest.param(
            GPUCTRL,
            [reference("other", name="x"), reference(controller=True)],
            True,
            id="controller-among-other-refs",
        ),
        pytest.param(GPUCTRL, [], False, id="labels-right-no-owner-ref"),
        pytest.param(
            GPUCTRL, [reference("other-uid", controller=True)], False, id="another-policy"
        ),
        pytest.param(GPUCTRL, [reference()], False, id="owner-ref-not-controller"),
        pytest.param(GPUCTRL, [reference(controller=False)], False, id="controller-false"),
        pytest.param(
            {"app.kubernetes.io/component": "driver"},
            [reference(controller=True)],
            False,
            id="no-managed-by-label",
        ),
        pytest.param(
            {**GPUCTRL, "app.kubernetes.io/managed-by": "Helm"},
            [reference(controller=True)],
            False,
            id="managed-by-someone-else",
        ),
        pytest.param({"app.kubernetes.io/component": "driver"}, [], False, id="users-helm-label"),
    ],
)
def test_only_what_gpuctrl_made_for_the_policy_is_prunable(
    labels: dict[str, str], refs: list[dict[str, Any]], passes: bool
) -> None:
    assert prunable(config_map("cm", labels, *refs), POLICY) is passes


def test_nothing_is_prunable_for_a_policy_without_a_uid() -> None:
    unsaved = {**POLICY, "metadata": {"name": "cluster"}}
    assert not prunable(config_map("cm", GPUCTRL, reference("", controller=True)), unsaved)


async def test_owned_objects_leave_out_a_users_config_map_with_the_component_label(
    cache: Cache,
) -> None:
    ours = config_map("gpuctrl-driver", GPUCTRL, reference(controller=True))
    users = config_map("repo-config", {"app.kubernetes.io/component": "driver"})
    informer(cache, CONFIG_MAPS, "gpuctrl").replace([ours, users])
    found = owned_objects(cache, CONFIG_MAPS, "gpuctrl", "driver", POLICY)
    assert [o["metadata"]["name"] for o in found] == ["gpuctrl-driver"]
