"""The node labeller, the node-status, repo-config and policy reconcilers against a hand-filled
cache: what each writes for the honoured policy, and that none writes for another."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reconcile_kit import (
    GPU_LABEL,
    NAMESPACE,
    HandFilledCache,
    StatusRecord,
    Writes,
    cluster_policy,
    gpu_node,
)

from api.v1alpha1 import load_cluster_policy
from controllers._labels import (
    DEPLOY_LABELS,
    DEPLOY_OPERANDS,
    GPU_PRESENT,
    MIG_DEPLOY_LABELS,
    NFD_GPU_LABELS,
)
from controllers.nodes import NodeLabeller, NodesReporter, enabled_components, label_changes
from controllers.policy import CONDITIONS, PolicyReconciler
from controllers.repoconfig import RepoConfigReconciler
from gpuctrl.runtime import Request

POLICY = Request("", "cluster")
ENABLED = enabled_components(load_cluster_policy({"spec": {}}))


def labeller(cluster: HandFilledCache, writes: Writes) -> NodeLabeller:
    return NodeLabeller(cluster.cache, writes, NAMESPACE)  # type: ignore[arg-type]


# Any mix of the labels the rule reads, with the values that matter and some that do not.
NODE_LABELS = st.dictionaries(
    st.sampled_from([*NFD_GPU_LABELS, GPU_PRESENT, DEPLOY_OPERANDS, *DEPLOY_LABELS.values()]),
    st.sampled_from(["true", "false", "", "paused"]),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=NODE_LABELS)
async def test_the_labeller_sends_the_rules_changes_only_guarded_by_the_version_read(
    cluster: HandFilledCache, labels: dict[str, str]
) -> None:
    writes = Writes()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels}}
    cluster.put(cluster_policy(), node)
    await labeller(cluster, writes)(Request("", "n"))
    expected = label_changes(labels, ENABLED)
    if not expected:
        assert writes.count == 0
        return
    [(path, body)] = writes.patched
    assert path == "/api/v1/nodes/n"
    assert body["metadata"]["labels"] == expected
    assert body["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    "policies",
    [
        pytest.param([], id="no-policy"),
        pytest.param([cluster_policy({"driver": {"version": 5}})], id="invalid-policy"),
    ],
)
async def test_the_labeller_writes_nothing_without_a_valid_honoured_policy(
    cluster: HandFilledCache, writes: Writes, policies: list[dict[str, Any]]
) -> None:
    cluster.put(*policies, gpu_node("gpu-a"))
    await labeller(cluster, writes)(Request("", "gpu-a"))
    await labeller(cluster, writes)(Request("", "vanished"))
    assert writes.count == 0


def labelled(name: str) -> dict[str, Any]:
    """A GPU node (not MIG-capable) with the deploy labels of the default policy's operands."""
    enabled = enabled_components(load_cluster_policy({}))
    deploy = {DEPLOY_LABELS[c] for c in enabled} - MIG_DEPLOY_LABELS
    labels = {GPU_PRESENT: "true", **dict.fromkeys(deploy, "true")}
    return gpu_node(name, **labels)


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        pytest.param([], ("True", "NoGPUNodes", "no GPU nodes"), id="none"),
        pytest.param(
            [labelled("a"), labelled("b"), gpu_node("c")],
            ("False", "LabelsPending", "GPU nodes await their labels"),
            id="one-pending",
        ),
        pytest.param(
            [
                labelled("a"),
                labelled("b"),
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu", "labels": {}}},
            ],
            ("True", "Reconciled", "2/2 GPU nodes labelled"),
            id="all-labelled",
        ),
    ],
)
async def test_the_nodes_reporter_counts_gpu_nodes_and_their_labels(
    cluster: HandFilledCache,
    status: StatusRecord,
    nodes: list[dict[str, Any]],
    expected: tuple[str, str, str],
) -> None:
    cluster.put(cluster_policy(generation=3), *nodes)
    await NodesReporter(cluster.cache, NAMESPACE, status)(POLICY)  # type: ignore[arg-type]
    entry = status.conditions["NodesLabelled"]
    assert (entry["status"], entry["reason"], entry["message"]) == expected
    assert entry["observedGeneration"] == 3


POLICY_RECONCILERS = [
    pytest.param(NodesReporter, "NodesLabelled", id="nodes-status"),
    pytest.param(RepoConfigReconciler, "RepoConfigReady", id="repo-config"),
]


@pytest.mark.parametrize(("kind", "condition"), POLICY_RECONCILERS)
async def test_a_reconciler_of_the_honoured_policy_leaves_a_younger_one_alone(
    cluster: HandFilledCache, status: StatusRecord, kind: Any, condition: str
) -> None:
    cluster.put(cluster_policy(), cluster_policy(name="young", created="2026-03-01T00:00:00Z"))
    await kind(cluster.cache, NAMESPACE, status)(Request("", "young"))
    assert not status.conditions
    await kind(cluster.cache, NAMESPACE, status)(POLICY)
    assert condition in status.conditions


@pytest.mark.parametrize(("kind", "condition"), POLICY_RECONCILERS)
async def test_a_reconciler_of_an_invalid_policy_says_unknown(
    cluster: HandFilledCache, status: StatusRecord, kind: Any, condition: str
) -> None:
    cluster.put(cluster_policy({"driver": {"version": 5}}), gpu_node("gpu-a"))
    await kind(cluster.cache, NAMESPACE, status)(POLICY)
    assert status.status_of(condition) == ("Unknown", "InvalidSpec")
    assert not status.events


async def test_repo_config_names_a_missing_config_map_and_warns_once_per_problem(
    cluster: HandFilledCache, status: StatusRecord
) -> None:
    spec = {"driver": {"repoConfig": {"configMapName": "site-repos"}}}
    cluster.put(cluster_policy(spec), gpu_node("gpu-a"))
    result = await RepoConfigReconciler(cluster.cache, NAMESPACE, status)(POLICY)  # type: ignore[arg-type]
    assert result is None  # no certificate to wait for
    found, reason = status.status_of("RepoConfigReady")
    assert (found, reason) == ("False", "InvalidRepoConfig")
    assert "site-repos" in status.conditions["RepoConfigReady"]["message"]
    assert [reason for _, reason, _ in status.events] == ["RepoConfigProblem"]


def every_part(generation: int, **overrides: str) -> list[dict[str, Any]]:
    return [
        {
            "type": kind,
            "status": overrides.get(kind, "True"),
            "reason": "Reconciled",
            "message": kind,
            "observedGeneration": generation,
        }
        for kind in CONDITIONS
    ]


def ready_pod(node: str, component: str) -> dict[str, Any]:
    """A Ready pod of ``component`` on ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{component}-{node}",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuctrl",
                "app.kubernetes.io/component": component,
            },
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def operand_daemonset(component: str, updated: int = 2, available: int = 2) -> dict[str, Any]:
    """``component``'s DaemonSet as the DaemonSet controller counts it, for 2 nodes."""
    meta = {
        "name": f"gpuctrl-{component}",
        "namespace": NAMESPACE,
        "generation": 1,
        "labels": {
            "app.kubernetes.io/managed-by": "gpuctrl",
            "app.kubernetes.io/component": component,
        },
    }
    status = {
        "observedGeneration": 1,
        "desiredNumberScheduled": 2,
        "updatedNumberScheduled": updated,
        "numberAvailable": available,
    }
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "status": status}


def policy_reconciler(cluster: HandFilledCache, status: StatusRecord) -> PolicyReconciler:
    return PolicyReconciler(cluster.cache, NAMESPACE, status)  # type: ignore[arg-type]


@pytest.mark.parametrize("ready_on", [["a", "b"], ["a"], []], ids=["both", "one", "none"])
async def test_the_policy_is_ready_only_with_every_part_and_every_node(
    cluster: HandFilledCache, status: StatusRecord, ready_on: list[str]
) -> None:
    cluster.put(cluster_policy(generation=2, conditions=every_part(2)))
    cluster.put(*(operand_daemonset(c) for c in DEPLOY_LABELS))
    cluster.put(gpu_node("a"), gpu_node("b"), gpu_node("cpu-like", **{GPU_LABEL: "false"}))
    cluster.put(*(ready_pod(n, c) for n in ready_on for c in DEPLOY_LABELS))
    await policy_reconciler(cluster, status)(POLICY)
    assert status.fields["readyNodes"] == f"{len(ready_on)}/2"
    assert status.fields["namespace"] == NAMESPACE
    expected = "ready" if len(ready_on) == 2 else "notReady"
    assert status.fields["state"] == expected
    assert status.status_of("Ready")[0] == ("True" if expected == "ready" else "False")


async def test_a_node_missing_one_component_is_not_counted_ready(
    cluster: HandFilledCache, status: StatusRecord
) -> None:
    cluster.put(cluster_policy(generation=2, conditions=every_part(2)), gpu_node("a"))
    cluster.put(*(operand_daemonset(c) for c in DEPLOY_LABELS))
    cluster.put(*(ready_pod("a", c) for c in DEPLOY_LABELS if c != "validator"))
    await policy_reconciler(cluster, status)(POLICY)
    assert status.fields["readyNodes"] == "0/1"


async def test_during_a_roll_no_more_nodes_count_than_run_the_new_pods(
    cluster: HandFilledCache, status: StatusRecord
) -> None:
    """The column never says every node is ready while old pods are being replaced."""
    cluster.put(cluster_policy(generation=2, conditions=every_part(2)), gpu_node("a"))
    cluster.put(gpu_node("b"), *(operand_daemonset(c) for c in DEPLOY_LABELS))
    cluster.put(*(ready_pod(n, c) for n in "ab" for c in DEPLOY_LABELS))
    reconcile = policy_reconciler(cluster, status)
    await reconcile(POLICY)
    assert (status.fields["state"], status.fields["readyNodes"]) == ("ready", "2/2")
    cluster.put(operand_daemonset("toolkit", updated=0))  # a new template: the roll begins
    cluster.put(cluster_policy(generation=2, conditions=every_part(2, ToolkitReady="False")))
    await reconcile(POLICY)
    assert (status.fields["state"], status.fields["readyNodes"]) == ("notReady", "0/2")
    cluster.put(operand_daemonset("toolkit", updated=1))
    await reconcile(POLICY)
    assert status.fields["readyNodes"] == "1/2"
