"""The policy controller: which ClusterPolicy is honoured, its aggregate ``Ready`` condition,
``status.state``, ``status.namespace`` and ``status.readyNodes`` (the printer column).

Only the oldest ClusterPolicy is honoured; every other gets ``state: ignored`` and
``Ready=False, reason=Ignored`` naming the honoured one. The honoured policy is ``ready`` when
it validates and every controller's condition is True for its current generation; a policy
that fails `api.v1alpha1.validate` gets ``InvalidSpec`` listing each problem with its path
(the operand controllers then leave every operand as it was).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from api.v1alpha1 import COMPONENT_LABEL
from controllers._honoured import Policy, add_policy_controller, every_policy, honoured, to_honoured
from controllers._kinds import CLUSTER_POLICIES, DAEMON_SETS, NODES, PODS
from controllers._readiness import PENDING, daemonset_readiness
from controllers._reads import (
    cached_list,
    node_role_changed,
    node_states,
    ready_components,
    state_nodes,
    watches,
)
from controllers._status import PolicyStatus, condition
from controllers.nodes import (
    DEPLOY_LABELS,
    LABELLED,
    enabled_components,
    is_gpu,
    node_components,
)
from controllers.operands import OPERANDS
from controllers.repoconfig import REPO_CONFIG_READY
from controllers.upgrade import UPGRADE
from gpuctrl.runtime import (
    Cache,
    Controller,
    Manager,
    Request,
    Result,
    resource_version_changed,
)

__all__ = [
    "CONDITIONS",
    "READY",
    "PolicyReconciler",
    "current_pods",
    "ready_nodes",
    "setup",
    "verdict",
]

READY = "Ready"
CONDITIONS = (
    LABELLED,
    REPO_CONFIG_READY,
    *(operand.condition for operand in OPERANDS),
    UPGRADE,
)
"""The conditions of the other controllers that ``Ready`` aggregates."""


def ready_nodes(
    nodes: Sequence[Mapping[str, Any]],
    running: Mapping[str, AbstractSet[str]],
    components: frozenset[str],
    current: Mapping[str, int],
) -> str:
    """``R/N``: of the N GPU nodes, R run a Ready pod of every component in ``components`` the
    node should run (`node_components`: the MIG manager only on MIG-capable nodes, none the MIG
    manager paused) (``running``: by node name, the components with a Ready pod there), and
    never more than ``current`` says run an available pod of a component's current template
    (during a roll the old pods stay Ready: a node counts once its DaemonSets count it
    updated)."""
    wanted = {
        n["metadata"]["name"]: node_components(labels, components)
        for n in nodes
        if is_gpu(labels := n["metadata"].get("labels") or {})
    }
    ready = [node for node, needs in wanted.items() if needs <= running.get(node, set())]
    # More ready nodes needing a component than its DaemonSets count: the counts lag.
    excess = max(
        (sum(c in wanted[node] for node in ready) - current.get(c, 0) for c in components),
        default=0,
    )
    return f"{len(ready) - max(excess, 0)}/{len(wanted)}"


def current_pods(daemonsets: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """By component, how many nodes run an available pod of its DaemonSets' current template
    (the DaemonSet controller's counts; none for a DaemonSet it has not yet observed)."""
    found: dict[str, int] = {}
    for ds in daemonsets:
        component = (ds["metadata"].get("labels") or {}).get(COMPONENT_LABEL, "")
        found[component] = found.get(component, 0) + daemonset_readiness(ds).ready
    return found


def verdict(policy: Policy, nodes: str) -> tuple[dict[str, Any], str, bool]:
    """The ``Ready`` condition and state of the honoured, valid ``policy`` whose GPU nodes
    run a Ready pod of every operand on ``nodes`` (``R/N``), and whether it goes without a
    Warning Event (the parts are merely not counted yet: waiting for a generation, or a
    DaemonSet not yet observed). Never ``ready`` with R < N: the pods' readiness can reach the
    cache before the DaemonSets' counts do."""
    generation = policy.obj["metadata"].get("generation")
    found = {c["type"]: c for c in (policy.obj.get("status") or {}).get("conditions") or ()}
    waiting = [
        t for t in CONDITIONS if t not in found or found[t].get("observedGeneration") != generation
    ]
    failed = [
        found[t] for t in CONDITIONS if t not in waiting and found[t]["status"] != "True"
    ]  # a condition of an older generation is waited for, not reported
    if failed:
        text = "; ".join(f"{c['type']}: {c.get('message', '')}" for c in failed)
        reason = failed[0].get("reason") or "OperandNotReady"
        pending = all(c.get("reason") == PENDING for c in failed)
        return condition(READY, False, reason, text, generation), "notReady", pending
    if waiting:
        text = f"waiting for {', '.join(waiting)} of generation {generation}"
        return condition(READY, False, "OperandNotReady", text, generation), "notReady", True
    ready, _, total = nodes.partition("/")
    if ready != total:
        text = f"{nodes} GPU nodes run a Ready pod of every operand"
        return condition(READY, False, "OperandNotReady", text, generation), "notReady", True
    reason = "NoGPUNodes" if found[LABELLED].get("reason") == "NoGPUNodes" else "Reconciled"
    text = "every enabled operand is ready on every GPU node"
    return condition(READY, True, reason, text, generation), "ready", False


class PolicyReconciler:
    """Writes a ClusterPolicy's ``Ready`` condition, ``state``, ``namespace`` and
    ``readyNodes`` through ``status``, from the policies, Nodes and operand Pods in ``cache``
    (see the module docstring)."""

    def __init__(self, cache: Cache, namespace: str, status: PolicyStatus) -> None:
        self._cache = cache
        self._namespace = namespace
        self._status = status

    async def __call__(self, request: Request) -> Result | None:
        """Write the status of the policy ``request.name`` (honoured, ignored or invalid)."""
        obj = self._cache.get(CLUSTER_POLICIES, request.name)
        top = honoured(self._cache)
        if obj is None or top is None:
            return None
        generation = obj["metadata"].get("generation")
        fields: dict[str, Any] = {"namespace": self._namespace}
        quiet = False
        if top.name != request.name:
            text = f"ClusterPolicy {top.name!r} is honoured (the oldest); this one is ignored"
            entry = condition(READY, False, "Ignored", text, generation)
            fields["state"] = "ignored"
        elif top.model is None:
            text = "; ".join(str(p) for p in top.problems)
            entry = condition(READY, False, "InvalidSpec", text, generation)
            fields["state"] = "notReady"
        else:
            components = enabled_components(top.model) & set(DEPLOY_LABELS)
            every_node = state_nodes(node_states(self._cache, self._namespace))
            running = ready_components(self._cache, self._namespace)
            daemonsets = cached_list(self._cache, DAEMON_SETS, self._namespace)
            current = current_pods(daemonsets)
            fields["readyNodes"] = ready_nodes(every_node, running, components, current)
            entry, fields["state"], quiet = verdict(top, fields["readyNodes"])
        await self._status.write(obj, [entry], fields, quiet=quiet)
        return None


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the policy controller to ``manager``: every write to a policy (its status carries
    the other controllers' conditions) reconciles it, a delete every policy (the deleted
    one may have been the honoured one, which every other names), and the operand Pods'
    and DaemonSets' changes (the ready-node count) the honoured one."""
    cache = manager.cache
    policy = to_honoured(cache)
    sources = [
        *watches(cache, PODS, namespace, policy, (resource_version_changed,)),
        *watches(cache, DAEMON_SETS, namespace, policy, (resource_version_changed,)),
        *watches(cache, NODES, namespace, policy, (node_role_changed,)),
    ]
    return add_policy_controller(
        manager,
        "policy",
        PolicyReconciler(cache, namespace, status),
        namespace,
        watches=sources,
        predicates=(resource_version_changed,),
        on_delete=every_policy(cache, namespace),
    )
