"""DaemonSet readiness, as NVIDIA's operator judges it, from cached objects alone (pure).

- 0 desired pods: ready.
- RollingUpdate: ``observedGeneration == generation`` and updated == available == desired.
- OnDelete (the driver's pods are never replaced behind a node's back): every pod on the
  newest ControllerRevision, Running and Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DaemonSetReadiness", "daemonset_readiness", "summary"]

REVISION_HASH = "controller-revision-hash"


@dataclass(frozen=True)
class DaemonSetReadiness:
    """One DaemonSet's verdict: ``ready`` of ``desired`` nodes run its current pod."""

    name: str
    ready: int
    desired: int
    done: bool


def daemonset_readiness(
    ds: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    revisions: Iterable[Mapping[str, Any]],
) -> DaemonSetReadiness:
    """The readiness of ``ds`` given the cached pods and ControllerRevisions (any owner)."""
    name = ds["metadata"]["name"]
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    current = status.get("observedGeneration") == ds["metadata"].get("generation")
    strategy = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy == "OnDelete":
        ready = _ready_on_newest_revision(ds, pods, revisions)
        return DaemonSetReadiness(name, ready, desired, current and ready >= desired)
    updated = int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    ready = min(updated, available) if current else 0
    done = desired == 0 or (current and updated == available == desired)
    return DaemonSetReadiness(name, min(ready, desired), desired, done)


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())


def _ready_on_newest_revision(
    ds: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    revisions: Iterable[Mapping[str, Any]],
) -> int:
    uid = ds["metadata"].get("uid", "")
    owned = [r for r in revisions if _owned_by(r, uid)]
    if not owned:
        return 0
    newest = max(owned, key=lambda r: int(r.get("revision") or 0))
    wanted = (newest["metadata"].get("labels") or {}).get(REVISION_HASH)
    return sum(
        1
        for pod in pods
        if _owned_by(pod, uid)
        and (pod["metadata"].get("labels") or {}).get(REVISION_HASH) == wanted
        and _running_and_ready(pod)
    )


def _running_and_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return status.get("phase") == "Running" and ready


def summary(operand: str, sets: Sequence[tuple[str, DaemonSetReadiness]]) -> str:
    """``driver: 3/4 nodes ready (ubuntu22.04 2/2, rhel9.4 1/2)``; the breakdown (by the label
    paired with each DaemonSet) only when there are several."""
    ready = sum(r.ready for _, r in sets)
    desired = sum(r.desired for _, r in sets)
    text = f"{operand}: {ready}/{desired} nodes ready"
    if len(sets) > 1:
        text += " (" + ", ".join(f"{label} {r.ready}/{r.desired}" for label, r in sets) + ")"
    return text
