"""The policy controller: which ClusterPolicy is honoured, its aggregate ``Ready`` condition,
``status.state``, ``status.namespace`` and ``status.readyNodes`` (the printer column).

Only the oldest ClusterPolicy is honoured; every other gets ``state: ignored`` and
``Ready=False, reason=Ignored`` naming the honoured one. The honoured policy is ``ready`` when
it validates and every controller's condition is True for its current generation; a policy
that fails `api.v1alpha1.validate` gets ``InvalidSpec`` listing each problem with its path
(the operand controllers then leave every operand as it was).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from controllers._cluster import (
    Policy,
    cached_list,
    honoured,
    informer,
    node_role_changed,
    node_states,
    ready_components,
    state_nodes,
    to_honoured,
)
from controllers._kinds import CLUSTER_POLICIES, NODES, PODS
from controllers._readiness import PENDING
from controllers._status import PolicyStatus, condition
from controllers.nodes import DEPLOY_LABELS, LABELLED, enabled_components, is_gpu
from controllers.operands import OPERANDS
from controllers.repoconfig import REPO_CONFIG_READY
from gpuctrl.runtime import (
    Controller,
    Event,
    Manager,
    Request,
    Result,
    resource_version_changed,
)

__all__ = ["CONDITIONS", "READY", "ready_nodes", "setup", "verdict"]

READY = "Ready"
CONDITIONS = (LABELLED, REPO_CONFIG_READY, *(operand.condition for operand in OPERANDS))
"""The conditions of the other controllers that ``Ready`` aggregates."""


def ready_nodes(
    nodes: Sequence[Mapping[str, Any]],
    running: Mapping[str, AbstractSet[str]],
    components: frozenset[str],
) -> str:
    """``R/N``: of the N GPU nodes, R run a Ready pod of every component in ``components``
    (``running``: by node name, the components with a Ready pod there)."""
    gpu = {n["metadata"]["name"] for n in nodes if is_gpu(n["metadata"].get("labels") or {})}
    ready = sum(1 for node in gpu if components <= running.get(node, set()))
    return f"{ready}/{len(gpu)}"


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


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the policy controller to ``manager``."""
    cache = manager.cache
    policies = informer(cache, CLUSTER_POLICIES, namespace)
    pods = informer(cache, PODS, namespace)
    nodes = informer(cache, NODES, namespace)

    async def reconcile(request: Request) -> Result | None:
        obj = cache.get(CLUSTER_POLICIES, request.name)
        top = honoured(cache)
        if obj is None or top is None:
            return None
        generation = obj["metadata"].get("generation")
        fields: dict[str, Any] = {"namespace": namespace}
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
            every_node = state_nodes(node_states(cache, namespace))
            running = ready_components(cache, namespace)
            fields["readyNodes"] = ready_nodes(every_node, running, components)
            entry, fields["state"], quiet = verdict(top, fields["readyNodes"])
        await status.write(obj, [entry], fields, quiet=quiet)
        return None

    def deleted(event: Event) -> bool:
        return event.type == "delete"

    def every_policy(obj: Mapping[str, Any]) -> list[Request]:
        # A deleted policy may have been the honoured one, which every other names.
        every = cached_list(cache, CLUSTER_POLICIES, namespace)
        return [Request("", str(p["metadata"]["name"])) for p in every]

    controller = Controller("policy", reconcile, clock=cache.clock)
    controller.watch(policies, predicates=(resource_version_changed,))
    controller.watch(policies, every_policy, (deleted,))
    controller.watch(pods, to_honoured(cache), (resource_version_changed,))
    controller.watch(nodes, to_honoured(cache), (node_role_changed,))
    manager.add(controller)
    return controller
