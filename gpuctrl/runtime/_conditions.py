"""Status conditions and the status writer: change ``/status`` only when something changed.

`set_condition` is pure: it puts one condition into a list keyed by ``type`` and keeps
``lastTransitionTime`` unless the condition's status changed. `update_status` is the
read-modify-write around it: it starts from the cached object (so an unchanged status costs
no request at all), writes the status subresource with the object's resourceVersion, and on
`Conflict` reads the object afresh and tries again. Apiservers before 1.22 cannot server-side
apply entries of a list-map inside ``/status`` reliably, hence the compare-and-swap.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._client import Client, Resource, retry_on_conflict
from ._errors import Conflict

__all__ = ["set_condition", "update_status"]


def set_condition(
    conditions: Sequence[Mapping[str, Any]], condition: Mapping[str, Any], now: str
) -> list[dict[str, Any]]:
    """``conditions`` with ``condition`` in place of the entry of its ``type`` (appended when
    absent). ``lastTransitionTime`` becomes ``now`` only when the status changed (or the type
    is new); otherwise the previous time is kept. The input is not modified."""
    updated = [dict(c) for c in conditions]
    new = dict(condition)
    for index, old in enumerate(updated):
        if old.get("type") == new["type"]:
            same = old.get("status") == new["status"] and old.get("lastTransitionTime")
            new["lastTransitionTime"] = old["lastTransitionTime"] if same else now
            updated[index] = new
            return updated
    new["lastTransitionTime"] = now
    updated.append(new)
    return updated


async def update_status(
    client: Client,
    resource: Resource,
    cached: Mapping[str, Any],
    mutate: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any] | None:
    """Write ``mutate(status)`` to ``cached``'s status subresource unless it equals the status
    already there; return the stored object, or None when nothing needed writing.

    ``mutate`` gets a private copy of the current status (``{}`` when absent) and returns the
    wanted one; it may be called again with a fresher status after a `Conflict`, so it must
    be a function of its argument alone. Raises `NotFound` when the object is gone.
    """
    current: dict[str, Any] = copy.deepcopy(dict(cached))

    async def attempt() -> dict[str, Any] | None:
        nonlocal current
        status = copy.deepcopy(current.get("status") or {})
        wanted = mutate(copy.deepcopy(status))
        if wanted == status:
            return None
        try:
            stored: dict[str, Any] = await client.update_status(
                resource, {**current, "status": wanted}
            )
        except Conflict:
            meta = current["metadata"]
            current = await client.get(resource, meta["name"], meta.get("namespace"))
            raise
        return stored

    return await retry_on_conflict(attempt)
