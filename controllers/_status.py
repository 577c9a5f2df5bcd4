"""Writing a ClusterPolicy's status: each controller its own condition, the policy controller
the state; a Warning Event whenever a condition turns False.

Writes go through `gpuctrl.runtime.update_status` (nothing is sent when the status already
says so; conflicts are retried on a fresh read), so a converged cluster sees no status writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from controllers._kinds import CLUSTER_POLICIES
from gpuctrl.runtime import Client, EventRecorder, NotFound, set_condition, update_status

__all__ = ["StatusWriter", "condition"]


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


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    """Writes conditions (and other status fields) of ClusterPolicies and records Events
    about them."""

    def __init__(self, client: Client, recorder: EventRecorder) -> None:
        self._client = client
        self.recorder = recorder

    async def write(
        self,
        policy: Mapping[str, Any],
        conditions: list[dict[str, Any]],
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Put ``conditions`` (and top-level status ``fields``) on ``policy`` as cached; no
        request when they are already there. A policy deleted meanwhile is no error."""
        now = _now()

        def mutate(status: dict[str, Any]) -> dict[str, Any]:
            entries = status.get("conditions") or []
            for entry in conditions:
                entries = set_condition(entries, entry, now)
            return {**status, **(fields or {}), "conditions": entries}

        before = _by_type(policy)
        try:
            stored = await update_status(self._client, CLUSTER_POLICIES, policy, mutate)
        except NotFound:
            return
        if stored is None:
            return
        for entry in conditions:
            if entry["status"] == "False" and before.get(entry["type"]) != "False":
                await self.event(
                    stored, "Warning", entry["reason"], f"{entry['type']}: {entry['message']}"
                )

    async def event(
        self, policy: Mapping[str, Any], type: Literal["Normal", "Warning"], reason: str, text: str
    ) -> None:
        """Record an Event about ``policy`` (best effort)."""
        await self.recorder.event(policy, type, reason, text)


def _by_type(policy: Mapping[str, Any]) -> dict[str, str]:
    status = policy.get("status") or {}
    return {c["type"]: c.get("status", "") for c in status.get("conditions") or ()}
