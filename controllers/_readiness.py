"""DaemonSet readiness, as NVIDIA's operator judges it, from the cached DaemonSet alone (pure).

- The DaemonSet controller has observed it (``observedGeneration == generation``; a DaemonSet
  just created has no status yet) and 0 pods are desired or updated == available == desired,
  for either update strategy. Under OnDelete (the driver's pods are never replaced behind a node's
  back) ``updatedNumberScheduled`` counts the nodes whose pod runs the DaemonSet controller's
  current revision, so the driver is ready only once every node runs its newest revision and
  that pod is available. The DaemonSet controller's own count is used rather than matching
  pods against ControllerRevisions: a DaemonSet deleted and recreated under one name can run
  on a revision its predecessor owned (the controller reuses one of the same name and
  template), which the garbage collector then deletes, leaving it none of its own until its
  next sync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PENDING", "DaemonSetReadiness", "daemonset_readiness", "summary"]

PENDING = "DaemonSetPending"
"""The reason of an operand's condition while the DaemonSet controller has not yet counted a
DaemonSet's current generation (not a problem: no Warning Event)."""


@dataclass(frozen=True)
class DaemonSetReadiness:
    """One DaemonSet's verdict: ``ready`` of ``desired`` nodes run its current pod; ``observed``:
    the DaemonSet controller has seen its current generation (else the counts are stale)."""

    name: str
    ready: int
    desired: int
    done: bool
    observed: bool = True


def daemonset_readiness(ds: Mapping[str, Any]) -> DaemonSetReadiness:
    """The readiness of ``ds`` from its status (the DaemonSet controller's counts)."""
    name = ds["metadata"]["name"]
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    current = status.get("observedGeneration") == ds["metadata"].get("generation")
    updated = int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    ready = min(updated, available) if current else 0
    done = current and (desired == 0 or updated == available == desired)
    return DaemonSetReadiness(name, min(ready, desired), desired, done, current)


def summary(operand: str, sets: Sequence[tuple[str, DaemonSetReadiness]]) -> str:
    """``driver: 3/4 nodes ready (ubuntu22.04 2/2, rhel9.4 1/2)``; the breakdown (by the label
    paired with each DaemonSet) only when there are several."""
    ready = sum(r.ready for _, r in sets)
    desired = sum(r.desired for _, r in sets)
    text = f"{operand}: {ready}/{desired} nodes ready"
    if len(sets) > 1:
        text += " (" + ", ".join(f"{label} {r.ready}/{r.desired}" for label, r in sets) + ")"
    return text
