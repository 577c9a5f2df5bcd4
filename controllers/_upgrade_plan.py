"""The driver upgrade rule (pure): from each driver node's facts, the policy's
``driver.upgradePolicy`` and the time, what to do next on each node.

A node's state is NVIDIA's label `STATE` with NVIDIA's values, so what NVIDIA's operator left
mid-way carries on here and dashboards keep working. Each step is one JSON merge patch of the
Node that sets the next state together with what the step changes (the cordon, the time it
entered the state, why it failed), so a manager killed between two requests never finds a
node cordoned with no record that gpuctrl cordoned it: `CORDONED` marks a cordon gpuctrl made,
and only such a cordon is lifted. Where NVIDIA rests in ``cordon-required`` and
``uncordon-required`` this rule makes the cordon and the uncordon part of the patch that
leaves the previous state; a node found in either (from NVIDIA's operator) moves on.

The steps: ``upgrade-required`` (the driver pod does not run its DaemonSet's newest revision,
or `REQUESTED`) waits for a slot (`UpgradePolicy.max_parallel_upgrades` minus the nodes in
progress, and no more nodes unavailable than ``maxUnavailable`` of the driver nodes); then
cordoned, ``wait-for-jobs-required`` (the pods of ``waitForCompletion.podSelector``),
``pod-deletion-required`` (pods using ``nvidia.com/gpu*`` resources, evicted), ``drain-required``
(when enabled), ``pod-restart-required`` (the old driver pod deleted, the new one Ready: its
startup probe passed), ``validation-required`` (the node's other operand pods recreated on the
new driver, the validator Ready), then uncordoned and ``upgrade-done``. A step that cannot
succeed (a pod the policy does not allow deleting, a timeout, a driver restarted more than
`MAX_DRIVER_RESTARTS` times, validation failing for `VALIDATION_TIMEOUT`) ends in
``upgrade-failed`` with `FAILURE` saying why; such a node starts over on a newer driver
revision, moves on to done once its driver and validator are healthy, and starts over when
its state label is deleted.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1 import (
    DriverUpgradePolicySpec,
    parse_selector,
    scaled_max_unavailable,
    selector_matches,
)

__all__ = [
    "CORDON",
    "CORDONED",
    "DELETE",
    "DONE",
    "DRAIN",
    "DRAIN_SKIP",
    "DRIVER_START_TIMEOUT",
    "ENABLED",
    "FAILED",
    "FAILURE",
    "IN_PROGRESS",
    "MAX_DRIVER_RESTARTS",
    "REQUESTED",
    "REQUIRED",
    "RESTART",
    "SINCE",
    "SKIP",
    "STATE",
    "TARGET",
    "UNCORDON",
    "VALIDATE",
    "VALIDATION_TIMEOUT",
    "WAIT",
    "NodeFacts",
    "PodFacts",
    "Step",
    "disable",
    "plan",
    "upgraded",
]

STATE = "nvidia.com/gpu-driver-upgrade-state"
REQUESTED = "nvidia.com/gpu-driver-upgrade-requested"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
DRAIN_SKIP = "nvidia.com/gpu-driver-upgrade-drain.skip"
CORDONED = "gpuctrl.io/driver-upgrade-cordoned"
SINCE = "gpuctrl.io/driver-upgrade-since"
FAILURE = "gpuctrl.io/driver-upgrade-failure"
TARGET = "gpuctrl.io/driver-upgrade-revision"
ENABLED = "nvidia.com/gpu-driver-upgrade-enabled"
"""NVIDIA's mark on a node whose driver upgrades the controller runs: NVIDIA's driver manager
then leaves GPU pod eviction and drain to it."""

REQUIRED = "upgrade-required"
CORDON = "cordon-required"
WAIT = "wait-for-jobs-required"
DELETE = "pod-deletion-required"
DRAIN = "drain-required"
RESTART = "pod-restart-required"
VALIDATE = "validation-required"
UNCORDON = "uncordon-required"
DONE = "upgrade-done"
FAILED = "upgrade-failed"
IN_PROGRESS = (CORDON, WAIT, DELETE, DRAIN, RESTART, VALIDATE, UNCORDON)
"""The states of a node being upgraded (each holds a slot)."""

MAX_DRIVER_RESTARTS = 10
"""NVIDIA's limit: a new driver pod restarted more often than this fails the node."""
VALIDATION_TIMEOUT = datetime.timedelta(seconds=600)
"""NVIDIA's limit on waiting for the validator on the new driver."""
DRIVER_START_TIMEOUT = datetime.timedelta(seconds=60 + 10 * 120 + 60)
"""How long the new driver pod may take to start: its startup probe's whole budget (60 s
initial delay, 120 failures 10 s apart, as NVIDIA's) and a minute for the pod to be made. A
node past it (its kubelet gone, the old pod stuck terminating) fails instead of waiting
unseen."""


@dataclass(frozen=True)
class PodFacts:
    """What the rule reads of one pod."""

    namespace: str
    name: str
    uid: str
    created: datetime.datetime
    labels: Mapping[str, str] = field(default_factory=dict)
    component: str = ""
    phase: str = "Running"
    ready: bool = False
    deleting: bool = False
    restarts: int = 0
    revision: str = ""
    gpu: bool = False
    empty_dir: bool = False
    controlled: bool = True
    daemon: bool = False
    failing_check: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        """Whether the pod ran to its end."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeFacts:
    """One driver node: its Node (`STATE`, cordon, annotations) and the pods on it: its driver
    pods, gpuctrl's other operand pods and everyone else's (``workloads``)."""

    name: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool
    ready: bool
    current_revision: str | None = None
    drivers: Sequence[PodFacts] = ()
    operands: Sequence[PodFacts] = ()
    workloads: Sequence[PodFacts] = ()

    @property
    def state(self) -> str:
        """The node's upgrade state ("" before the first)."""
        return self.labels.get(STATE, "")

    @property
    def driver(self) -> PodFacts | None:
        """The driver pod that is not being deleted, the newest if several."""
        live = [p for p in self.drivers if not p.deleting]
        return max(live, key=lambda p: p.created) if live else None

    @property
    def unavailable(self) -> bool:
        """Cordoned or not Ready."""
        return self.unschedulable or not self.ready

    def since(self) -> datetime.datetime | None:
        """When the node entered its state (`SINCE`), if it says."""
        try:
            return datetime.datetime.fromisoformat(self.annotations[SINCE])
        except (KeyError, ValueError):
            return None


@dataclass(frozen=True)
class Step:
    """What to do on one node: a merge ``patch`` of the Node (conditional on its
    resourceVersion), pods to ``evict`` and to ``delete``; ``waiting`` or ``failure`` says
    why it is not done, ``blocked`` whether a pod, budget or check holds it up (worth a Warning);
    ``deadline``: when to look again though nothing changed."""

    node: str
    state: str
    patch: dict[str, Any] | None = None
    evict: tuple[PodFacts, ...] = ()
    delete: tuple[PodFacts, ...] = ()
    waiting: str = ""
    failure: str = ""
    blocked: bool = False
    deadline: datetime.datetime | None = None

    @property
    def next_state(self) -> str:
        """The state after the patch."""
        if self.patch is None:
            return self.state
        return str(self.patch["metadata"].get("labels", {}).get(STATE, self.state))


def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).isoformat(timespec="microseconds")


def _floor(moment: datetime.datetime) -> datetime.datetime:
    # Pod creation times have whole seconds: a pod created in the second of `moment` counts.
    return moment.replace(microsecond=0)


def _move(
    node: NodeFacts,
    state: str,
    now: datetime.datetime,
    *,
    cordon: bool | None = None,
    extra: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """The merge patch taking ``node`` to ``state`` at ``now`` (``cordon`` True cordons,
    False lifts gpuctrl's cordon; None leaves it)."""
    annotations: dict[str, str | None] = {SINCE: _stamp(now), ENABLED: "true", **(extra or {})}
    patch: dict[str, Any] = {
        "metadata": {"resourceVersion": node.resource_version, "labels": {STATE: state}}
    }
    if cordon is True and not node.unschedulable:
        patch["spec"] = {"unschedulable": True}
        annotations[CORDONED] = "true"
    elif cordon is False:
        if CORDONED in node.annotations:
            patch["spec"] = {"unschedulable": None}
        annotations.update({CORDONED: None, SINCE: None, FAILURE: None, TARGET: None})
        if REQUESTED in node.annotations:
            annotations[REQUESTED] = None
    patch["metadata"]["annotations"] = annotations
    return patch


def _annotate(node: NodeFacts, annotations: Mapping[str, str | None]) -> dict[str, Any]:
    """A merge patch of ``annotations`` alone, conditional on the node's resourceVersion."""
    return {
        "metadata": {"resourceVersion": node.resource_version, "annotations": dict(annotations)}
    }


def disable(node: NodeFacts) -> Step | None:
    """With autoUpgrade off: the step taking `ENABLED` off ``node`` (NVIDIA's driver manager
    evicts GPU pods itself then), None when it has none."""
    if ENABLED not in node.annotations:
        return None
    return Step(node.name, node.state, _annotate(node, {ENABLED: None}))


def _needs_upgrade(node: NodeFacts) -> bool:
    driver = node.driver
    if node.annotations.get(REQUESTED) == "true":
        return True
    return (
        driver is not None
        and node.current_revision is not None
        and driver.revision != node.current_revision
    )


def _fresh_driver(node: NodeFacts) -> PodFacts | None:
    """The driver pod on the newest revision created since the node entered its state."""
    driver, since = node.driver, node.since()
    if driver is None or driver.revision != node.current_revision:
        return None
    if since is not None and driver.created < _floor(since):
        return None
    return driver


def _validator(node: NodeFacts, after: datetime.datetime | None) -> PodFacts | None:
    found = [
        p
        for p in node.operands
        if p.component == "validator" and not p.deleting and (after is None or p.created >= after)
    ]
    return max(found, key=lambda p: p.created) if found else None


def _deadline(node: NodeFacts, seconds: int) -> datetime.datetime | None:
    since = node.since()
    if seconds <= 0 or since is None:
        return None
    return since + datetime.timedelta(seconds=seconds)


def _removal(
    node: NodeFacts,
    now: datetime.datetime,
    pods: Sequence[PodFacts],
    *,
    what: str,
    setting: str,
    force: bool,
    delete_empty_dir: bool,
    timeout: int,
    blockers: Mapping[str, str],
    next_state: str,
) -> Step:
    """The step that evicts ``pods`` (GPU pods, or those a drain removes) until none is left."""
    if not pods:
        return Step(node.name, node.state, _move(node, next_state, now))
    for pod in pods:
        if not pod.controlled and not force:
            why = f"pod {pod} is managed by no controller ({setting}.force deletes it)"
            return _fail(node, now, why)
        if pod.empty_dir and not delete_empty_dir:
            why = f"pod {pod} has emptyDir volumes ({setting}.deleteEmptyDir deletes them)"
            return _fail(node, now, why)
    names = ", ".join(f"{p}{_blocked(p, blockers)}" for p in pods)
    deadline = _deadline(node, timeout)
    if deadline is not None and now >= deadline:
        return _fail(node, now, f"{what} still on the node after {timeout}s: {names}")
    evict = tuple(p for p in pods if not p.deleting)
    return Step(
        node.name,
        node.state,
        evict=evict,
        waiting=f"evicting {what} {names}",
        blocked=any(str(p) in blockers for p in pods),
        deadline=deadline,
    )


def _blocked(pod: PodFacts, blockers: Mapping[str, str]) -> str:
    why = blockers.get(str(pod))
    return f" ({why})" if why else ""


def _fail(node: NodeFacts, now: datetime.datetime, why: str) -> Step:
    return Step(node.name, node.state, _move(node, FAILED, now, extra={FAILURE: why}), failure=why)


def _done(node: NodeFacts, now: datetime.datetime) -> Step:
    return Step(node.name, node.state, _move(node, DONE, now, cordon=False))


def _start(node: NodeFacts, now: datetime.datetime) -> Step:
    target = {TARGET: node.current_revision or None, FAILURE: None}
    return Step(node.name, node.state, _move(node, WAIT, now, cordon=True, extra=target))


def _step(
    node: NodeFacts,
    policy: DriverUpgradePolicySpec,
    now: datetime.datetime,
    *,
    validator: bool,
    blockers: Mapping[str, str],
) -> Step:
    """The next step of a node in progress (or failed)."""
    state = node.state
    if state == CORDON:
        return _start(node, now)
    if state == WAIT:
        return _wait_for_jobs(node, policy, now)
    if state == DELETE:
        pods = [p for p in node.workloads if p.gpu and not p.finished]
        deletion = policy.gpu_pod_deletion
        return _removal(
            node,
            now,
            pods,
            what="GPU pods",
            setting="gpuPodDeletion",
            force=deletion.force,
            delete_empty_dir=deletion.delete_empty_dir,
            timeout=deletion.timeout_seconds,
            blockers=blockers,
            next_state=DRAIN if policy.drain.enable else RESTART,
        )
    if state == DRAIN:
        drain = policy.drain
        selector = parse_selector(drain.pod_selector)
        pods = [
            p
            for p in node.workloads
            if not p.daemon
            and not p.finished
            and p.labels.get(DRAIN_SKIP) != "true"
            and selector_matches(selector, p.labels)
        ]
        return _removal(
            node,
            now,
            pods,
            what="pods",
            setting="drain",
            force=drain.force,
            delete_empty_dir=drain.delete_empty_dir,
            timeout=drain.timeout_seconds,
            blockers=blockers,
            next_state=RESTART,
        )
    if state == RESTART:
        return _restart(node, now)
    if state == VALIDATE:
        return _validate(node, now, validator=validator)
    if state == UNCORDON:
        return _done(node, now)
    return _recover(node, now, validator=validator)  # FAILED


def _wait_for_jobs(
    node: NodeFacts, policy: DriverUpgradePolicySpec, now: datetime.datetime
) -> Step:
    wait = policy.wait_for_completion
    if wait.pod_selector.strip():
        selector = parse_selector(wait.pod_selector)
        running = [
            p for p in node.workloads if not p.finished and selector_matches(selector, p.labels)
        ]
        deadline = _deadline(node, wait.timeout_seconds)
        if running and (deadline is None or now < deadline):
            names = ", ".join(map(str, running))
            text = f"waiting for pod {names} to finish"
            return Step(node.name, node.state, waiting=text, blocked=True, deadline=deadline)
    return Step(node.name, node.state, _move(node, DELETE, now))


def _crash_looping(driver: PodFacts | None) -> str:
    if driver is not None and driver.restarts > MAX_DRIVER_RESTARTS:
        return f"driver pod {driver} restarted {driver.restarts} times"
    return ""


def _restart(node: NodeFacts, now: datetime.datetime) -> Step:
    fresh = _fresh_driver(node)
    since = node.since() or now
    deadline = since + DRIVER_START_TIMEOUT
    seconds = int(DRIVER_START_TIMEOUT.total_seconds())
    if fresh is None:
        stale = tuple(p for p in node.drivers if not p.deleting)
        going = [p for p in node.drivers if p.deleting]
        if now >= deadline:
            held = f": driver pod {going[0]} is still being deleted" if going else ""
            return _fail(node, now, f"no new driver pod within {seconds}s{held}")
        text = "waiting for the new driver pod"
        return Step(node.name, node.state, delete=stale, waiting=text, deadline=deadline)
    if why := _crash_looping(fresh):
        return _fail(node, now, why)
    if not fresh.ready:
        if now >= deadline:
            return _fail(node, now, f"driver pod {fresh} did not start within {seconds}s")
        text = f"waiting for driver pod {fresh} to start (its startup probe)"
        return Step(node.name, node.state, waiting=text, deadline=deadline)
    return Step(node.name, node.state, _move(node, VALIDATE, now))


def _validate(node: NodeFacts, now: datetime.datetime, *, validator: bool) -> Step:
    """Recreate the node's other operand pods (a DaemonSet's, made before the state began) on
    the new driver; done once none is left and the validator is Ready on it."""
    if why := _crash_looping(node.driver):
        return _fail(node, now, why)
    since = _floor(node.since() or now)
    stale = tuple(
        p
        for p in node.operands
        if p.daemon and p.component != "driver" and not p.deleting and p.created < since
    )
    pod = _validator(node, since)
    if not stale and (not validator or (pod is not None and pod.ready)):
        return _done(node, now)
    deadline = (node.since() or now) + VALIDATION_TIMEOUT
    if stale:
        detail = "restarting " + ", ".join(map(str, stale))
    elif pod is None:
        detail = "no validator pod yet"
    elif pod.failing_check:
        detail = f"validator pod {pod}: {pod.failing_check}"
    else:
        detail = f"validator pod {pod} not Ready"
    if now >= deadline:
        seconds = int(VALIDATION_TIMEOUT.total_seconds())
        return _fail(node, now, f"validation did not pass within {seconds}s: {detail}")
    return Step(
        node.name,
        node.state,
        delete=stale,
        waiting=f"validating: {detail}",
        blocked=pod is not None and bool(pod.failing_check),
        deadline=deadline,
    )


def _recover(node: NodeFacts, now: datetime.datetime, *, validator: bool) -> Step:
    why = node.annotations.get(FAILURE, "upgrade failed")
    target = node.annotations.get(TARGET)
    if node.current_revision and target and node.current_revision != target:
        return Step(node.name, node.state, _move(node, REQUIRED, now))
    driver = node.driver
    healthy = (
        driver is not None
        and driver.revision == node.current_revision
        and driver.ready
        and not _crash_looping(driver)
    )
    if healthy and driver is not None:
        checked = _validator(node, _floor(driver.created))
        if not validator or (checked is not None and checked.ready):
            return _done(node, now)
    return Step(node.name, node.state, failure=why)


def _idle(node: NodeFacts, now: datetime.datetime) -> Step | None:
    """The step of a node not in progress, unless it is a candidate for a slot (None). A
    value that is no state (someone's typo) counts as none: the node is judged afresh."""
    shown = node.state
    state = shown if shown in (DONE, REQUIRED) else ""
    if node.labels.get(SKIP) == "true":
        return Step(node.name, shown)
    needs = _needs_upgrade(node)
    if state in ("", DONE):
        if CORDONED in node.annotations or needs:
            return Step(node.name, shown, _move(node, REQUIRED, now))
        if state != shown or (
            state == "" and node.driver is not None and node.current_revision is not None
        ):
            return Step(node.name, shown, _move(node, DONE, now))
        if node.annotations.get(ENABLED) != "true":
            return Step(node.name, shown, _annotate(node, {ENABLED: "true"}))
        return Step(node.name, shown)
    if not needs and CORDONED not in node.annotations:
        return Step(node.name, shown, _move(node, DONE, now))
    return None


@dataclass
class _Slots:
    """What may start: nodes in progress of at most ``parallel``, unavailable of ``limit``."""

    in_progress: int
    unavailable: int
    parallel: int
    limit: int

    def take(self, node: NodeFacts, now: datetime.datetime) -> Step:
        """Start ``node`` if a slot is free (an unavailable node takes no unavailability)."""
        if self.in_progress >= self.parallel:
            text = f"waiting for a slot: {self.in_progress} of {self.parallel} upgrading"
            return Step(node.name, node.state, waiting=text)
        if not node.unavailable and self.unavailable >= self.limit:
            text = (
                f"waiting for a slot: {self.unavailable} of at most {self.limit} nodes unavailable"
            )
            # With none in progress no slot frees by itself: nodes cordoned or down for other
            # reasons hold it up (worth a Warning).
            return Step(node.name, node.state, waiting=text, blocked=self.in_progress == 0)
        self.in_progress += 1
        self.unavailable += 0 if node.unavailable else 1
        return _start(node, now)


def _after(node: NodeFacts, patch: Mapping[str, Any]) -> NodeFacts:
    """``node`` as it will be once ``patch`` is applied."""
    meta = patch["metadata"]
    annotations = {**node.annotations, **meta.get("annotations", {})}
    spec = patch.get("spec", {})
    return dataclasses.replace(
        node,
        labels={**node.labels, **meta.get("labels", {})},
        annotations={k: v for k, v in annotations.items() if v is not None},
        unschedulable=bool(spec["unschedulable"])
        if "unschedulable" in spec
        else node.unschedulable,
    )


def _merged(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """One merge patch doing ``first`` then ``second`` (its resourceVersion ``first``'s)."""
    merged: dict[str, Any] = {"metadata": dict(first["metadata"])}
    for key in ("labels", "annotations"):
        both = {**first["metadata"].get(key, {}), **second["metadata"].get(key, {})}
        if both:
            merged["metadata"][key] = both
    spec = {**first.get("spec", {}), **second.get("spec", {})}
    if spec:
        merged["spec"] = spec
    return merged


def plan(
    nodes: Sequence[NodeFacts],
    policy: DriverUpgradePolicySpec,
    now: datetime.datetime,
    *,
    validator: bool = True,
    blockers: Mapping[str, str] | None = None,
) -> list[Step]:
    """The step of every node, by name. ``validator``: the validator runs (else the new
    driver being Ready is enough); ``blockers``: by pod (``ns/name``), why its last eviction
    was refused. Slots go to the waiting nodes in name order; a node already unavailable
    takes no share of ``maxUnavailable`` when it starts.

    Transitions that follow at once (no job to wait for, no GPU pod to evict) are one patch:
    a node whose step only moves its state is planned again as it will be, and the patches
    are merged until a step has pods to evict or delete, or waits."""
    ordered = sorted(nodes, key=lambda n: n.name)
    slots = _Slots(
        in_progress=sum(1 for n in ordered if n.state in IN_PROGRESS),
        unavailable=sum(1 for n in ordered if n.unavailable),
        parallel=policy.max_parallel_upgrades or len(ordered),
        limit=scaled_max_unavailable(policy.max_unavailable, len(ordered)),
    )

    def decide(node: NodeFacts) -> Step:
        if node.state in (*IN_PROGRESS, FAILED):
            return _step(node, policy, now, validator=validator, blockers=blockers or {})
        idle = _idle(node, now)
        return idle if idle is not None else slots.take(node, now)

    steps = []
    for node in ordered:
        step = decide(node)
        current = node
        for _ in range(len(IN_PROGRESS) + 3):  # each state at most once
            if step.patch is None or step.failure or step.evict or step.delete:
                break
            current = _after(current, step.patch)
            following = decide(current)
            if following.evict or following.delete:
                break
            patch = step.patch if following.patch is None else _merged(step.patch, following.patch)
            step = dataclasses.replace(following, state=node.state, patch=patch)
        steps.append(step)
    return steps


def upgraded(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say it runs its current driver, validated (or it is skipped,
    or has no upgrade state yet)."""
    return labels.get(STATE) in (None, "", DONE) or labels.get(SKIP) == "true"
