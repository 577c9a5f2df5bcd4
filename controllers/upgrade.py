"""The driver upgrade controller (``DriverUpgrade``): replaces each node's driver pod in turn,
as `controllers._upgrade_plan` rules, when the driver DaemonSets (always OnDelete) change.

One key, the honoured ClusterPolicy: a reconcile reads every driver node
(``nvidia.com/gpu.deploy.driver=true``) with the pods on it from the cache, plans each node's
step and carries it out: one merge patch of the Node conditional on the resourceVersion read
(a stale read fails with `Conflict` and is retried, so no step runs twice), evictions through
the Eviction API (PodDisruptionBudgets are honoured; a refusal's reason is kept to name the
budget), deletions of operand pods by uid. Node events, pods on nodes that wait for them, the
driver's pods, DaemonSets and ControllerRevisions, and PodDisruptionBudgets trigger it;
timeouts are requeues at the deadline. Whenever a node waits or fails for a new reason it gets
a Warning Event (reason ``GPUDriverUpgrade``) saying why, and the policy's ``DriverUpgrade``
condition counts the nodes and names those not done.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from prometheus_client import Gauge

from api.v1alpha1 import ClusterPolicy
from controllers._honoured import Policy, add_policy_controller, honoured, to_honoured
from controllers._kinds import DAEMON_SETS, MANAGED_SELECTOR, NODES, PODS
from controllers._reads import watches
from controllers._status import INVALID_SPEC, PolicyStatus, condition
from controllers._upgrade_plan import (
    CORDONED,
    DELETE,
    DONE,
    DRAIN,
    ENABLED,
    FAILED,
    FAILURE,
    IN_PROGRESS,
    REQUESTED,
    SINCE,
    STATE,
    TARGET,
    VALIDATE,
    WAIT,
    NodeFacts,
    PodFacts,
    Step,
    disable,
    plan,
    upgraded,
)
from gpuctrl.runtime import (
    METRICS_REGISTRY,
    ApiError,
    Cache,
    Client,
    Conflict,
    Controller,
    Event,
    Manager,
    NotFound,
    Predicate,
    Request,
    Resource,
    Result,
    TooManyRequests,
    Watch,
)

__all__ = ["DRIVER_NODES", "UPGRADE", "DriverUpgrader", "setup"]

UPGRADE = "DriverUpgrade"
REASON = "GPUDriverUpgrade"
DRIVER_NODES = "nvidia.com/gpu.deploy.driver=true"
CONTROLLER_REVISIONS = Resource("apps/v1", "ControllerRevision", "controllerrevisions")
DISRUPTION_BUDGETS = Resource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
_ON_NODE = "gpuctrl-on-node"
_BY_STATE = "gpuctrl-upgrade-state"
_KEPT_ANNOTATIONS = (CORDONED, SINCE, FAILURE, TARGET, REQUESTED, ENABLED)
_GPU_PREFIX = "nvidia.com/gpu"
_LISTED = 5  # nodes named per kind in the condition's message

_NODES = Gauge(
    "gpuctrl_driver_upgrade_nodes",
    "Driver nodes by upgrade status (NVIDIA's nodes_upgrades_*): in_progress, done, failed, "
    "pending (need an upgrade, not started), available (slots to start one now).",
    ["status"],
    registry=METRICS_REGISTRY,
)


def _driver_node(node: dict[str, Any]) -> dict[str, Any]:
    """A driver Node as the upgrade reads it: identity, upgrade labels and gpuctrl's
    annotations, the cordon, the Ready condition."""
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    conditions = (node.get("status") or {}).get("conditions") or ()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            **{k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta},
            "labels": {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu-driver")},
            "annotations": {k: annotations[k] for k in _KEPT_ANNOTATIONS if k in annotations},
        },
        "spec": {"unschedulable": bool((node.get("spec") or {}).get("unschedulable"))},
        "status": {
            "conditions": [
                {"type": "Ready", "status": c.get("status")}
                for c in conditions
                if c.get("type") == "Ready"
            ]
        },
    }


def _uses_gpu(spec: Mapping[str, Any]) -> bool:
    for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
        resources = container.get("resources") or {}
        for amounts in (resources.get("limits") or {}, resources.get("requests") or {}):
            if any(name.startswith(_GPU_PREFIX) for name in amounts):
                return True
    return False


def _workload(pod: dict[str, Any]) -> dict[str, Any]:
    """Any Pod as the upgrade reads it: identity, labels, node, phase, the kind of its
    controller, whether it uses GPUs or emptyDir volumes."""
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    owners = meta.get("ownerReferences") or ()
    controller = next((o.get("kind", "") for o in owners if o.get("controller")), "")
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        controller = "Node"  # a static pod: the kubelet keeps it, eviction cannot remove it
    kept = ("name", "namespace", "uid", "resourceVersion", "labels", "creationTimestamp")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **{k: meta[k] for k in kept if k in meta},
            "deleting": "deletionTimestamp" in meta,
        },
        "spec": {"nodeName": spec.get("nodeName")},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
        "upgrade": {
            "controller": controller,
            "gpu": _uses_gpu(spec),
            "emptyDir": any("emptyDir" in v for v in spec.get("volumes") or ()),
        },
    }


def _time(text: str | None) -> datetime.datetime:
    if not text:
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _workload_facts(pod: Mapping[str, Any]) -> PodFacts:
    meta, facts = pod["metadata"], pod["upgrade"]
    return PodFacts(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid", ""),
        created=_time(meta.get("creationTimestamp")),
        labels=meta.get("labels") or {},
        phase=(pod.get("status") or {}).get("phase") or "Pending",
        deleting=bool(meta.get("deleting")),
        gpu=facts["gpu"],
        empty_dir=facts["emptyDir"],
        controlled=bool(facts["controller"]),
        daemon=facts["controller"] in ("DaemonSet", "Node"),
    )


def _failing_check(status: Mapping[str, Any]) -> str:
    """The first init container (a validator check) that did not succeed, and how."""
    for entry in status.get("initContainerStatuses") or ():
        state = entry.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        last = (entry.get("lastState") or {}).get("terminated") or {}
        if "terminated" in state or last:
            code = (state.get("terminated") or last).get("exitCode")
            return f"check {entry.get('name')} failed (exit code {code})"
        return f"check {entry.get('name')} has not passed"
    return ""


def _operand_facts(pod: Mapping[str, Any]) -> PodFacts:
    meta = pod["metadata"]
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    conditions = status.get("conditions") or ()
    owners = meta.get("ownerReferences") or ()
    return PodFacts(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        created=_time(meta.get("creationTimestamp")),
        labels=labels,
        component=labels.get("app.kubernetes.io/component", ""),
        phase=status.get("phase") or "Pending",
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        deleting="deletionTimestamp" in meta,
        restarts=sum(
            int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or ()
        ),
        revision=labels.get("controller-revision-hash", ""),
        daemon=any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners),
        failing_check=_failing_check(status),
    )


def _owner_name(obj: Mapping[str, Any], kind: str) -> str | None:
    for owner in obj["metadata"].get("ownerReferences") or ():
        if owner.get("kind") == kind and owner.get("controller"):
            return str(owner.get("name"))
    return None


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = node["status"]["conditions"]
    return any(c.get("status") == "True" for c in conditions)


class DriverUpgrader:
    """The ``driver-upgrade`` reconciler (see the module docstring): reads from ``cache``,
    writes with ``client`` in the operand ``namespace``, reports through ``status``."""

    def __init__(self, cache: Cache, client: Client, namespace: str, status: PolicyStatus) -> None:
        self._cache = cache
        self._client = client
        self._namespace = namespace
        self._status = status
        # Nodes as this reconciler last wrote them, by name, with the resourceVersion it wrote
        # over: read instead of the cache's copy until the cache moves past it.
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        self._blockers: dict[str, str] = {}  # pod (ns/name) -> why its eviction was refused
        self._told: dict[str, str] = {}  # node -> the last reason its Event gave

    async def __call__(self, request: Request) -> Result | None:
        """Upgrade the driver nodes of the policy ``request.name`` if it is the honoured one."""
        policy = honoured(self._cache)
        if policy is None or policy.name != request.name:
            return None
        if policy.model is None:
            await self._condition(policy, None, *INVALID_SPEC)
            return None
        model = policy.model
        if not model.spec.driver.enabled:
            await self._condition(policy, True, "Disabled", "the driver is disabled")
            return None
        upgrade = model.spec.driver.upgrade_policy
        if not upgrade.auto_upgrade:
            for node in self._nodes().values():
                if (step := disable(node)) is not None and step.patch is not None:
                    await self._patch(node, step.patch)
            text = "autoUpgrade is false: a driver pod is replaced when someone deletes it"
            await self._condition(policy, True, "AutoUpgradeDisabled", text)
            return None
        now = datetime.datetime.now(datetime.UTC)
        nodes = self._nodes()
        steps = plan(
            list(nodes.values()),
            upgrade,
            now,
            validator=model.spec.validator.enabled,
            blockers=self._blockers,
        )
        conflicted = False
        for step in steps:
            try:
                await self._carry_out(nodes[step.node], step)
            except (Conflict, NotFound):
                conflicted = True  # read again: another write got there first, or it is gone
        await self._report(policy, model, steps, nodes)
        if conflicted:
            return Result(requeue=True)
        deadlines = [s.deadline for s in steps if s.deadline is not None and s.patch is None]
        if deadlines:
            return Result(requeue_after=max(0.1, (min(deadlines) - now).total_seconds()))
        return None

    def _nodes(self) -> dict[str, NodeFacts]:
        revisions = self._current_revisions()
        operands: dict[str, list[PodFacts]] = {}
        driver_sets: dict[str, str] = {}
        for pod in self._cache.list(PODS, self._namespace, label_selector=MANAGED_SELECTOR):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                facts = _operand_facts(pod)
                operands.setdefault(node, []).append(facts)
                if facts.component == "driver":
                    driver_sets[node] = _owner_name(pod, "DaemonSet") or ""
        found = {}
        for obj in self._cache.list(NODES, label_selector=DRIVER_NODES):
            obj = self._latest(obj)
            meta = obj["metadata"]
            name = meta["name"]
            pods = operands.get(name, [])
            workloads = self._cache.list(PODS, index=(_ON_NODE, name))
            found[name] = NodeFacts(
                name=name,
                resource_version=meta["resourceVersion"],
                labels=meta["labels"],
                annotations=meta["annotations"],
                unschedulable=obj["spec"]["unschedulable"],
                ready=_ready(obj),
                current_revision=revisions.get(driver_sets.get(name, "")),
                drivers=[p for p in pods if p.component == "driver"],
                operands=[p for p in pods if p.component != "driver"],
                workloads=[
                    _workload_facts(p)
                    for p in workloads
                    if not (
                        p["metadata"].get("namespace") == self._namespace
                        and (p["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")
                        == "gpuctrl"
                    )
                ],
            )
        return found

    def _latest(self, node: dict[str, Any]) -> dict[str, Any]:
        name = node["metadata"]["name"]
        written = self._written.get(name)
        if written is None:
            return node
        over, obj = written
        if node["metadata"]["resourceVersion"] == over:
            return obj
        del self._written[name]  # the cache has seen our write, or a later one
        return node

    def _current_revisions(self) -> dict[str, str]:
        """By driver DaemonSet name, the hash of its newest ControllerRevision."""
        newest: dict[str, tuple[int, str]] = {}
        for revision in self._cache.list(
            CONTROLLER_REVISIONS, self._namespace, label_selector=MANAGED_SELECTOR
        ):
            owner = _owner_name(revision, "DaemonSet")
            labels = revision["metadata"].get("labels") or {}
            if owner is None or "controller-revision-hash" not in labels:
                continue
            number = int(revision.get("revision") or 0)
            if owner not in newest or number > newest[owner][0]:
                newest[owner] = (number, labels["controller-revision-hash"])
        return {owner: found for owner, (_, found) in newest.items()}

    async def _carry_out(self, node: NodeFacts, step: Step) -> None:
        for pod in step.evict:
            await self._evict(pod)
        for pod in step.delete:
            with contextlib.suppress(Conflict):  # already replaced by another of that name
                await self._client.delete(PODS, pod.name, pod.namespace, uid=pod.uid)
        if step.patch is not None:
            stored = await self._patch(node, step.patch)
            if step.failure:
                self._event(stored, "Warning", f"upgrade failed: {step.failure}")
            elif step.next_state in IN_PROGRESS and step.state not in IN_PROGRESS:
                self._event(stored, "Normal", "driver upgrade started: node cordoned")
            elif step.next_state == DONE and step.state in (*IN_PROGRESS, FAILED):
                self._event(stored, "Normal", "driver upgrade done: node validated, uncordoned")
        elif step.blocked and self._told.get(node.name) != step.waiting:
            self._told[node.name] = step.waiting
            subject = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name}}
            self._event(self._cache_node(node.name) or subject, "Warning", step.waiting)

    async def _patch(self, node: NodeFacts, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``patch``; read the Node as it answered until the cache catches up."""
        stored: dict[str, Any] = await self._client.merge_patch(NODES, node.name, patch)
        self._written[node.name] = (node.resource_version, _driver_node(stored))
        self._told.pop(node.name, None)
        return stored

    async def _evict(self, pod: PodFacts) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        try:
            await self._client.request(
                "POST", PODS.path(pod.namespace, pod.name, "eviction"), body=body
            )
        except NotFound:
            self._blockers.pop(str(pod), None)
        except TooManyRequests as error:
            self._blockers[str(pod)] = _refusal(pod, error)
        else:
            self._blockers.pop(str(pod), None)

    def _cache_node(self, name: str) -> dict[str, Any] | None:
        return self._cache.get(NODES, name, label_selector=DRIVER_NODES)

    def _event(
        self, node: Mapping[str, Any], kind: Literal["Normal", "Warning"], text: str
    ) -> None:
        subject = {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]}
        self._status.event(subject, kind, REASON, text)

    async def _report(
        self,
        policy: Policy,
        model: ClusterPolicy,
        steps: Sequence[Step],
        nodes: Mapping[str, NodeFacts],
    ) -> None:
        done = [s for s in steps if upgraded({**nodes[s.node].labels, STATE: s.next_state})]
        failed = [s for s in steps if s.next_state == FAILED]
        busy = [s for s in steps if s.next_state in IN_PROGRESS]
        pending = [s for s in steps if s not in done and s not in failed and s not in busy]
        upgrade = model.spec.driver.upgrade_policy
        parallel = upgrade.max_parallel_upgrades or len(steps)
        _NODES.labels("done").set(len(done))
        _NODES.labels("failed").set(len(failed))
        _NODES.labels("in_progress").set(len(busy))
        _NODES.labels("pending").set(len(pending))
        _NODES.labels("available").set(max(0, parallel - len(busy)))
        # Counts, and the nodes held up or failed with why: a message that changes with each
        # node's every step would cost a status write per step.
        text = f"{len(done)}/{len(steps)} upgraded"
        if busy:
            held = [s for s in busy if s.blocked]
            text += f", {len(busy)} in progress" + (f" ({_named(held)})" if held else "")
        if pending:
            why = next((s.waiting for s in pending if s.waiting), "")
            text += f", {len(pending)} pending" + (f" ({why})" if why else "")
        if failed:
            text += f", {len(failed)} failed ({_named(failed)})"
        if failed:
            await self._condition(policy, False, "UpgradeFailed", text)
        elif busy or pending:
            await self._condition(policy, False, "UpgradeInProgress", text, quiet=True)
        else:
            await self._condition(policy, True, "Upgraded", text)

    async def _condition(
        self, policy: Policy, ok: bool | None, reason: str, message: str, *, quiet: bool = False
    ) -> None:
        generation = policy.obj["metadata"].get("generation")
        entry = condition(UPGRADE, ok, reason, message, generation)
        await self._status.write(policy.obj, [entry], quiet=quiet)


def _named(steps: Sequence[Step]) -> str:
    shown = [f"{s.node}: {s.failure or s.waiting or s.next_state}" for s in steps[:_LISTED]]
    if len(steps) > _LISTED:
        shown.append(f"and {len(steps) - _LISTED} more")
    return "; ".join(shown)


def _refusal(pod: PodFacts, error: ApiError) -> str:
    """Why an eviction was refused: the budget's own words, naming it."""
    details = (error.body or {}).get("details") or {}
    causes = [c.get("message", "") for c in details.get("causes") or () if c.get("message")]
    text = "; ".join(causes) or error.message or "eviction refused"
    return f"PodDisruptionBudget in {pod.namespace}: {text}"


def _on_node(pod: Mapping[str, Any]) -> tuple[str, ...]:
    node = (pod.get("spec") or {}).get("nodeName")
    return (str(node),) if node else ()


def _nodes_in(cache: Cache, states: Iterable[str]) -> Iterable[str]:
    """The driver nodes in ``states`` (from the state index: only those are decoded)."""
    for state in states:
        for node in cache.list(NODES, label_selector=DRIVER_NODES, index=(_BY_STATE, state)):
            yield node["metadata"]["name"]


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the driver upgrade controller to ``manager``."""
    cache = manager.cache
    policy = to_honoured(cache)
    nodes = cache.informer(NODES, label_selector=DRIVER_NODES, transform=_driver_node)
    if not nodes.store.has_index(_BY_STATE):
        nodes.add_index(_BY_STATE, lambda node: (node["metadata"]["labels"].get(STATE, ""),))
    pods = cache.informer(PODS, transform=_workload)
    if not pods.store.has_index(_ON_NODE):
        pods.add_index(_ON_NODE, _on_node)

    # Pods matter on nodes in the states that wait for them. Before the Nodes synced no node
    # is in any: their own adds start the first reconcile.
    def on_node_in(*states: str) -> Predicate:
        def passes(event: Event) -> bool:
            node = (event.obj.get("spec") or {}).get("nodeName")
            return nodes.has_synced and node is not None and node in _nodes_in(cache, states)

        return passes

    def any_waiting(event: Event) -> bool:
        return nodes.has_synced and any(_nodes_in(cache, (WAIT, DELETE, DRAIN)))

    def is_driver(event: Event) -> bool:
        labels = event.obj["metadata"].get("labels") or {}
        return labels.get("app.kubernetes.io/component") == "driver"

    validating = on_node_in(VALIDATE, FAILED)

    def operand_pod(event: Event) -> bool:
        return is_driver(event) or validating(event)

    sources = [
        Watch(NODES, policy, label_selector=DRIVER_NODES, transform=_driver_node),
        Watch(PODS, policy, (on_node_in(WAIT, DELETE, DRAIN),), transform=_workload),
        Watch(DISRUPTION_BUDGETS, policy, (any_waiting,), metadata_only=True),
        Watch(CONTROLLER_REVISIONS, policy, namespace=namespace, label_selector=MANAGED_SELECTOR),
        *watches(cache, PODS, namespace, policy, (operand_pod,)),
        *watches(cache, DAEMON_SETS, namespace, policy, (is_driver,)),
    ]
    reconciler = DriverUpgrader(cache, manager.client, namespace, status)
    return add_policy_controller(manager, "driver-upgrade", reconciler, namespace, watches=sources)
