"""Writing a ClusterPolicy's status: each controller its own condition, the policy controller
the state; a Warning Event whenever a condition turns False or, while False, changes its
reason. While the spec is invalid every controller's condition is ``Unknown`` with reason
``InvalidSpec`` (`INVALID_SPEC`): the problems are on ``Ready``, and no part says it is fine.

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

__all__ = ["INVALID_SPEC", "PolicyStatus", "condition"]

INVALID_SPEC = ("InvalidSpec", "the spec is invalid (its problems are on condition Ready)")
"""The reason and message of a controller's ``Unknown`` condition while the spec is invalid."""


def condition(
    type: str, ok: bool | None, reason: str, message: str, generation: int | None
) -> dict[str, Any]:
    """A condition entry for ``status.conditions`` (its time is set when it is written);
    ``ok`` None is status ``Unknown``."""
    found: dict[str, Any] = {
        "type": type,
        "status": "Unknown" if ok is None else "True" if ok else "False",
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
            if entry["status"] == "False" and before.get(entry["type"]) != (
                "False",
                entry["reason"],
            ):
                text = f"{entry['type']}: {entry['message']}"
                self.event(stored, "Warning", entry["reason"], text)
        return True

    def event(
        self, policy: Mapping[str, Any], type: Literal["Normal", "Warning"], reason: str, text: str
    ) -> None:
        """Record an Event about ``policy`` (sent in the background, best effort)."""
        self._recorder.event(policy, type, reason, text)


def _by_type(policy: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    status = policy.get("status") or {}
    conditions = status.get("conditions") or ()
    return {c["type"]: (c.get("status", ""), c.get("reason", "")) for c in conditions}
