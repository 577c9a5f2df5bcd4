"""Recording core/v1 Events about objects, counting repeats instead of duplicating them."""

from __future__ import annotations

import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp

from ._client import Client, Resource
from ._errors import ApiError, NotFound

__all__ = ["EVENTS", "EventRecorder"]

log = logging.getLogger("gpuctrl.runtime.events")

EVENTS = Resource("v1", "Event", "events")

_EventKey = tuple[str, str, str, str, str]  # involved object uid/key, namespace, type, reason, msg


class EventRecorder:
    """Records Events as ``component``. Recording the same (object, type, reason, message)
    again bumps ``count`` and ``lastTimestamp`` of the Event already written, as client-go's
    recorder does; the last ``remembered`` distinct events are tracked.

    Events are best effort: a failure to write one is logged, never raised.
    """

    def __init__(self, client: Client, component: str, *, remembered: int = 4096) -> None:
        self._client = client
        self._component = component
        self._host = socket.gethostname()
        self._remembered = remembered
        self._written: OrderedDict[_EventKey, tuple[str, int]] = OrderedDict()

    async def event(
        self,
        obj: Mapping[str, Any],
        type: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        """Record that ``reason`` (CamelCase) happened to ``obj``, explained by ``message``."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid") or meta["name"], namespace, type, reason, message)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            if key in self._written and await self._bump(key, namespace, stamp):
                return
            name = f"{meta['name']}.{time.time_ns():x}"
            await self._client.create(EVENTS, self._new_event(obj, name, namespace, key, stamp))
            self._remember(key, name, 1)
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as error:
            log.warning("could not record event %s on %s: %r", reason, meta["name"], error)

    async def _bump(self, key: _EventKey, namespace: str, stamp: str) -> bool:
        """Count one more occurrence on the Event written before; False if it is gone."""
        name, count = self._written[key]
        patch = {"count": count + 1, "lastTimestamp": stamp}
        try:
            await self._client.merge_patch(EVENTS, name, patch, namespace)
        except NotFound:
            del self._written[key]
            return False
        self._remember(key, name, count + 1)
        return True

    def _remember(self, key: _EventKey, name: str, count: int) -> None:
        self._written[key] = (name, count)
        self._written.move_to_end(key)
        while len(self._written) > self._remembered:
            self._written.popitem(last=False)

    def _new_event(
        self, obj: Mapping[str, Any], name: str, namespace: str, key: _EventKey, stamp: str
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "type": key[2],
            "reason": key[3],
            "message": key[4],
            "source": {"component": self._component, "host": self._host},
            "reportingComponent": self._component,
            "reportingInstance": self._host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
