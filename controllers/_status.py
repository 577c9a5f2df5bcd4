"""Writing a ClusterPolicy's status: each controller its own condition, the policy controller
the state; a Warning Event whenever a condition turns False.

Writes go through `gpuctrl.runtime.StatusWriter` (nothing is sent when the status already
says so; each controller's write replaces only its own condition, so the seven writers of one
policy do not conflict), so a converged cluster sees no status writes.
Events are handed to the manager's recorder, which sends them in the background.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from controllers._kinds import CLUSTER_POLICIES
from gpuctrl.runtime import EventRecorder, NotFound, StatusWriter

__all__ = ["PolicyStatus", "condition"]


def condition(
    type: str, ok: bool, reason: str, message: str, generation: int | None
) -> dict[str, Any]:
    """A condition entry for ``status.conditions`` (its time is set when it is written)."""
    found: dict[str, Any] = {
        "type": type,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
    }
    if generation is not None:
        found["observedGeneration"] = generation
    return found


class PolicyStatus:
    """Writes conditions (and other status fields) of ClusterPolicies and records Events
    about them."""

    def __init__(self, writer: StatusWriter, recorder: EventRecorder) -> None:
        self._writer = writer
        self._recorder = recorder

    async def write(
        self,
        policy: Mapping[str, Any],
        conditions: list[dict[str, Any]],
        fields: Mapping[str, Any] | None = None,
        *,
        quiet: bool = False,
    ) -> bool:
        """Put ``conditions`` (and top-level status ``fields``) on ``policy`` as cached; no
        request when they are already there; whether it wrote. A policy deleted meanwhile is
        no error. ``quiet``: no Event for a condition turning False (the caller records its
        own)."""
        before = _by_type(policy)
        try:
            stored = await self._writer.write(CLUSTER_POLICIES, policy, conditions, fields)
        except NotFound:
            return False
        if stored is None:
            return False
        for entry in [] if quiet else conditions:
            if entry["status"] == "False" and before.get(entry["type"]) != "False":
                text = f"{entry['type']}: {entry['message']}"
                self.event(stored, "Warning", entry["reason"], text)
        return True

    def event(
        self, policy: Mapping[str, Any], type: Literal["Normal", "Warning"], reason: str, text: str
    ) -> None:
        """Record an Event about ``policy`` (sent in the background, best effort)."""
        self._recorder.event(policy, type, reason, text)


def _by_type(policy: Mapping[str, Any]) -> dict[str, str]:
    status = policy.get("status") or {}
    return {c["type"]: c.get("status", "") for c in status.get("conditions") or ()}
