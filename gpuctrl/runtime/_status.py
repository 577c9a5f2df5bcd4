"""Status: conditions that keep their transition time, written so that writers of different
conditions never conflict.

`set_condition` edits a ``status.conditions`` list as ``meta.SetStatusCondition`` does:
``lastTransitionTime`` moves only when the condition's status changes. `StatusWriter.write`
puts conditions and top-level fields on the status subresource with a JSON patch (RFC 6902)
that replaces only its own entries, each guarded by a ``test`` of the entry's ``type`` at its
index, so several controllers each owning one condition of one object do not invalidate each
other's writes as a read-modify-write PUT does (under churn, one of seven such writers kept
losing the compare-and-swap for seconds). Only adding an entry, or the first status, is a
compare-and-swap on the resourceVersion.

Server-side apply of list-map entries on ``/status`` works on the API servers we run (1.34) and
was measured against this patch (``test/bench/bench_status.py``, seven writers flipping their
conditions at once from stale copies): apply sends one request per write and is never refused,
this patch about 2.2 requests and 0.6 refusals per write, but apply's median write is about 7x
slower (the apiserver merges managed fields; its p99 is no worse). It is not used because an apply
removes every field its manager applied before and omits now: one writer shared by several
controllers would need a field manager per set of keys and a restatement of the whole set on
each write, which the callers do not promise.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ._client import Client, retry_on_conflict
from ._clock import Clock
from ._errors import Conflict, Invalid, NotFound
from ._objects import thaw
from ._resources import Resource
from ._timestamps import kube_time

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


@dataclass
class _Written:
    """What a `StatusWriter` last wrote of one object: at which resourceVersion, and the value
    of each key (``@Type`` for a condition, else a status field)."""

    version: str
    values: dict[str, Any]


class StatusWriter:
    """Writes status conditions and fields only when they change, retrying as
    `retry_on_conflict` does (at most ``attempts`` tries, waiting on ``clock``) when the object
    changed under a write (a guard failed on a stale copy: the last such `Conflict` propagates).

    It remembers what it last wrote of each object (by uid): an object read from a cache that
    has not yet seen that write is read afresh before a write is skipped or computed, so a
    value is never left unwritten because a stale copy already showed it. The memory of an
    object ends when a copy at the written resourceVersion is seen (the cache has caught up)
    or the object is gone, and at most ``remember`` objects are remembered (the least recently
    written is forgotten first), so churning objects cannot grow it without end."""

    def __init__(
        self,
        client: Client,
        *,
        attempts: int = 5,
        remember: int = 10_000,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._attempts = attempts
        self._clock = clock
        self._remember_at_most = remember
        self._written: OrderedDict[str, _Written] = OrderedDict()

    @property
    def remembered(self) -> int:
        """How many objects' writes are remembered (see the class docstring)."""
        return len(self._written)

    async def write(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        conditions: Iterable[Mapping[str, Any]] = (),
        fields: Mapping[str, Any] | None = None,
        *,
        now: datetime | None = None,
    ) -> dict[str, Any] | None:
        """Set ``conditions`` (entries with ``type``, ``status``, ``reason``, ``message`` and
        optionally ``observedGeneration``, as `set_condition` takes them) and the top-level
        status ``fields`` on ``obj`` (e.g. as read from the cache), sending only what differs.
        Returns the written object, or None when nothing differed. `NotFound` propagates (the
        object is gone); a write the server refuses for the object as read afresh (`Invalid`)
        propagates too."""
        wanted = [dict(c) for c in conditions]
        values = dict(fields or {})
        current: dict[str, Any] = thaw(obj)
        meta = current["metadata"]
        uid = str(meta.get("uid", ""))
        memory = self._written.get(uid)
        if memory is not None and memory.version == meta.get("resourceVersion"):
            del self._written[uid]  # the copy is the write itself: the cache caught up
        keys = ["@" + entry["type"] for entry in wanted] + list(values)
        if not self._agrees(uid, current, keys):
            current = await self._fresh(resource, current)

        async def attempt() -> dict[str, Any] | None:
            nonlocal current
            ops = _patch(current, wanted, values, now)
            if not ops:
                return None
            try:
                written: dict[str, Any] = await self._client.json_patch(
                    resource, meta["name"], ops, meta.get("namespace"), sub="status"
                )
            except NotFound:
                self._written.pop(uid, None)
                raise
            except Invalid as error:
                fresh = await self._fresh(resource, current)
                if _patch(fresh, wanted, values, now) == ops:
                    raise  # refused as it stands, not because the object moved
                current = fresh  # a guard failed on a stale copy: a conflict, retried
                raise Conflict(409, "Conflict", f"changed under the patch: {error}") from error
            self._remember(uid, written, wanted, values)
            return written

        return await retry_on_conflict(attempt, attempts=self._attempts, clock=self._clock)

    def _agrees(self, uid: str, obj: Mapping[str, Any], keys: Iterable[str]) -> bool:
        """Whether ``obj`` shows what this writer last wrote of ``keys`` (``@Type`` for a
        condition, else a field); the writes of other keys need not have reached it."""
        memory = self._written.get(uid)
        written = memory.values if memory is not None else {}
        status = obj.get("status") or {}
        entries = {c.get("type"): c for c in status.get("conditions") or ()}
        return all(
            (entries.get(key[1:]) if key.startswith("@") else status.get(key)) == written[key]
            for key in keys
            if key in written
        )

    def _remember(
        self,
        uid: str,
        written: Mapping[str, Any],
        wanted: list[dict[str, Any]],
        values: Mapping[str, Any],
    ) -> None:
        status = written.get("status") or {}
        entries = {c.get("type"): c for c in status.get("conditions") or ()}
        memory = self._written.pop(uid, None) or _Written("", {})
        memory.version = str(written["metadata"].get("resourceVersion", ""))
        for entry in wanted:
            memory.values["@" + entry["type"]] = entries.get(entry["type"])
        for key in values:
            memory.values[key] = status.get(key)
        self._written[uid] = memory  # the most recently written last
        while len(self._written) > self._remember_at_most:
            self._written.popitem(last=False)

    async def _fresh(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        found: dict[str, Any] = await self._client.get(
            resource, meta["name"], meta.get("namespace")
        )
        return found


def _patch(
    obj: Mapping[str, Any],
    wanted: list[dict[str, Any]],
    values: Mapping[str, Any],
    now: datetime | None,
) -> list[dict[str, Any]]:
    """The JSON patch that takes ``obj``'s status to ``wanted`` conditions and ``values``;
    empty when it already says so."""
    before = obj.get("status")
    status: dict[str, Any] = copy.deepcopy(before or {})
    entries: list[dict[str, Any]] = status.setdefault("conditions", []) if wanted else []
    known = len(entries)
    changed = [i for i, entry in enumerate(wanted) if _set(entries, entry, now)]
    fields = {k: v for k, v in values.items() if status.get(k) != v}
    status.update(fields)
    if not changed and not fields:
        return []
    if (
        not isinstance(before, dict)
        or len(entries) > known
        or (wanted and "conditions" not in before)
    ):
        # A new entry, or no status or list yet: compare-and-swap the whole status.
        rv = obj["metadata"].get("resourceVersion", "")
        return [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/status", "value": status},
        ]
    ops: list[dict[str, Any]] = []
    for key, value in fields.items():
        ops.append({"op": "add", "path": f"/status/{_pointer(key)}", "value": value})
    for i in changed:
        index = next(n for n, e in enumerate(entries) if e.get("type") == wanted[i]["type"])
        where = f"/status/conditions/{index}"
        ops.append({"op": "test", "path": f"{where}/type", "value": wanted[i]["type"]})
        ops.append({"op": "replace", "path": where, "value": entries[index]})
    return ops


def _set(entries: list[dict[str, Any]], entry: Mapping[str, Any], now: datetime | None) -> bool:
    return set_condition(
        entries,
        type=entry["type"],
        status=entry["status"],
        reason=entry["reason"],
        message=entry.get("message", ""),
        observed_generation=entry.get("observedGeneration"),
        now=now,
    )


def _pointer(key: str) -> str:
    """``key`` as one JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _stamp(now: datetime | None) -> str:
    return kube_time(now)
