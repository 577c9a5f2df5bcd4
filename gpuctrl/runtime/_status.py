"""Status: conditions that keep their transition time, and writes of ``/status`` only on change.

`set_condition` edits a ``status.conditions`` list as ``meta.SetStatusCondition`` does:
``lastTransitionTime`` moves only when the condition's status changes. `StatusWriter.update`
reads-modifies-writes the status subresource (a PUT with the resourceVersion read: a compare-
and-swap), skipping the write when nothing changed and reading afresh after a `Conflict`.
A PUT rather than server-side apply: an API server of 1.20 cannot apply single list-map
entries (one condition) on ``/status`` without taking over the whole list.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from ._client import Client, retry_on_conflict
from ._clock import Clock
from ._errors import Conflict
from ._objects import thaw
from ._resources import Resource

__all__ = ["StatusWriter", "set_condition"]

ConditionStatus = Literal["True", "False", "Unknown"]


def set_condition(
    conditions: list[dict[str, Any]],
    *,
    type: str,
    status: ConditionStatus | bool,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: datetime | None = None,
) -> bool:
    """Add or update the condition ``type`` in ``conditions`` (in place); whether anything
    changed. ``lastTransitionTime`` becomes ``now`` (default: the current UTC time) only when
    the condition is new or its status changed; a bool ``status`` means "True"/"False"."""
    value = ("True" if status else "False") if isinstance(status, bool) else status
    wanted: dict[str, Any] = {"type": type, "status": value, "reason": reason, "message": message}
    if observed_generation is not None:
        wanted["observedGeneration"] = observed_generation
    for i, existing in enumerate(conditions):
        if existing.get("type") != type:
            continue
        if existing.get("status") == value and "lastTransitionTime" in existing:
            wanted["lastTransitionTime"] = existing["lastTransitionTime"]
        else:
            wanted["lastTransitionTime"] = _stamp(now)
        if observed_generation is None and "observedGeneration" in existing:
            wanted["observedGeneration"] = existing["observedGeneration"]
        changed = existing != wanted
        conditions[i] = wanted
        return changed
    conditions.append({**wanted, "lastTransitionTime": _stamp(now)})
    return True


class StatusWriter:
    """Writes the status subresource only when it changes, retrying conflicts (at most
    ``attempts`` tries, waiting on ``clock``)."""

    def __init__(self, client: Client, *, attempts: int = 5, clock: Clock | None = None) -> None:
        self._client = client
        self._attempts = attempts
        self._clock = clock

    async def update(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        mutate: Callable[[dict[str, Any]], object],
    ) -> dict[str, Any] | None:
        """Apply ``mutate(status)`` (it edits the status dict in place) to ``obj`` (e.g. as read
        from the cache) and write it if it changed; on `Conflict` read the object from the API
        server and apply ``mutate`` again. Returns the written object, or None when ``mutate``
        changed nothing. `NotFound` propagates (the object is gone)."""
        current: dict[str, Any] = thaw(obj)
        meta = current["metadata"]

        async def attempt() -> dict[str, Any] | None:
            nonlocal current
            before = current.get("status") or {}
            status = copy.deepcopy(before)
            mutate(status)
            if status == before:
                return None
            try:
                written: dict[str, Any] = await self._client.update_status(
                    resource, {**current, "status": status}
                )
            except Conflict:  # read afresh for the next attempt
                current = await self._client.get(resource, meta["name"], meta.get("namespace"))
                raise
            return written

        return await retry_on_conflict(attempt, attempts=self._attempts, clock=self._clock)


def _stamp(now: datetime | None) -> str:
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
