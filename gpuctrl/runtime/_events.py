"""Recording core/v1 Events about objects without ever blocking a reconcile or flooding the
API server, as client-go's recorder does.

`EventRecorder.event` only queues; the manager's `EventSink` (a runnable on every replica)
sends in the background. Before sending, client-go's correlation (``events_cache.go``) runs in
`EventCorrelator`, a pure function of the events and the clock:

1. aggregation: once more than ``max_similar`` (10) events of one object, source, type and
   reason with *different* messages arrive within ``aggregate_window`` (600 s), later ones are
   combined into one Event whose message starts "(combined from similar events): ";
2. de-duplication: the same event again bumps ``count`` and ``lastTimestamp`` of the Event
   already written (a patch) instead of creating another;
3. spam filter: a token bucket per object and source (burst 25, one more every 300 s) drops
   what exceeds it, so a hot loop cannot flood the API server.

A full queue drops the event (logged); a failed write is logged, never raised: Events are best
effort.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._client import Client
from ._clock import Clock, SystemClock
from ._errors import TRANSIENT_ERRORS, ApiError, NotFound
from ._resources import Resource
from ._timestamps import kube_time

__all__ = ["EVENTS", "EventCorrelator", "EventRecorder", "EventSink", "Send"]

log = logging.getLogger("gpuctrl.runtime.events")

EVENTS = Resource("v1", "Event", "events")

EventType = Literal["Normal", "Warning"]
_COMBINED = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class Send:
    """What to send for one recorded event: ``create`` the Event ``body``, or bump the one
    written before (``body`` holds the new count, lastTimestamp and message)."""

    create: bool
    body: dict[str, Any]


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    last_seen: float = 0.0


class EventCorrelator:
    """client-go's aggregation, de-duplication and spam filter (see the module docstring),
    on ``clock``; it remembers at most ``remembered`` keys of each kind (least recent dropped)."""

    def __init__(
        self,
        clock: Clock,
        *,
        max_similar: int = 10,
        aggregate_window: float = 600.0,
        burst: int = 25,
        refill_every: float = 300.0,
        remembered: int = 4096,
    ) -> None:
        self._clock = clock
        self._max_similar = max_similar
        self._window = aggregate_window
        self._burst = burst
        self._refill_every = refill_every
        self._remembered = remembered
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._written: OrderedDict[tuple[str, ...], dict[str, Any]] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()

    def correlate(self, event: dict[str, Any]) -> Send | None:
        """What to send for ``event`` (a complete new Event), or None when the spam filter
        drops it."""
        now = self._clock.now()
        source = _source_key(event)
        aggregate = (*source, event["type"], event["reason"])
        event, dedupe = self._aggregate(event, aggregate, now)
        if not self._take_token(source, now):
            return None
        previous = self._written.get(dedupe)
        if previous is not None:
            previous["count"] += 1
            previous["lastTimestamp"] = event["lastTimestamp"]
            previous["message"] = event["message"]
            _remember(self._written, dedupe, previous, self._remembered)
            return Send(False, dict(previous))
        _remember(self._written, dedupe, dict(event), self._remembered)
        return Send(True, event)

    def forget(self, send: Send) -> Send:
        """The Event behind ``send`` is gone (a patch found nothing): a create of it instead."""
        for written in self._written.values():
            if written["metadata"]["name"] == send.body["metadata"]["name"]:
                written["count"] = 1
                written["firstTimestamp"] = written["lastTimestamp"]
                return Send(True, dict(written))
        return send

    def _aggregate(
        self, event: dict[str, Any], aggregate: tuple[str, ...], now: float
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        similar = self._similar.get(aggregate)
        if similar is None or now - similar.last_seen > self._window:
            similar = _Similar()
        similar.messages.add(event["message"])
        similar.last_seen = now
        _remember(self._similar, aggregate, similar, self._remembered)
        if len(similar.messages) <= self._max_similar:
            return event, (*aggregate, event["message"])
        combined = dict(event, message=_COMBINED + event["message"])
        return combined, aggregate

    def _take_token(self, source: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(source) or _Bucket(float(self._burst), now)
        bucket.tokens = min(
            self._burst, bucket.tokens + (now - bucket.updated) / self._refill_every
        )
        bucket.updated = now
        _remember(self._buckets, source, bucket, self._remembered)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True


class EventSink:
    """The manager's background sender of Events (a runnable on every replica, started before
    the caches): `submit` queues (at most ``queue_size``, then drops), `start` sends."""

    needs_leader = False
    needs_cache = False

    def __init__(self, client: Client, *, clock: Clock | None = None, queue_size: int = 1000):
        self._client = client
        self._correlator = EventCorrelator(clock if clock is not None else SystemClock())
        self._queue: deque[dict[str, Any]] = deque()
        self._queue_size = queue_size
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, event: dict[str, Any]) -> None:
        """Queue ``event`` for sending; never blocks (drops it when the queue is full)."""
        if len(self._queue) >= self._queue_size:
            log.warning("event queue full; dropping %s event", event["reason"])
            return
        self._queue.append(event)
        self._idle.clear()
        self._wake.set()

    async def flush(self) -> None:
        """Return once every event queued so far was sent (or dropped)."""
        await self._idle.wait()

    async def start(self, stop: asyncio.Event) -> None:
        """Send queued events until ``stop`` is set (what is queued then is dropped)."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                while self._queue and not stop.is_set():
                    await self._send(self._queue.popleft())
                self._idle.set()
                self._wake.clear()
                waking = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait([waking, stopping], return_when=asyncio.FIRST_COMPLETED)
                waking.cancel()
        finally:
            stopping.cancel()
            self._queue.clear()
            self._idle.set()

    async def _send(self, event: dict[str, Any]) -> None:
        send = self._correlator.correlate(event)
        if send is None:
            return
        meta = send.body["metadata"]
        try:
            if not send.create:
                try:
                    patch = {k: send.body[k] for k in ("count", "lastTimestamp", "message")}
                    await self._client.merge_patch(EVENTS, meta["name"], patch, meta["namespace"])
                    return
                except NotFound:
                    send = self._correlator.forget(send)
            await self._client.create(EVENTS, send.body)
        except (*TRANSIENT_ERRORS, ApiError) as error:
            log.warning("could not record event %s: %r", event["reason"], error)


class EventRecorder:
    """Records Events about objects as ``component``; see the module docstring."""

    def __init__(self, sink: EventSink, component: str) -> None:
        self._sink = sink
        self._component = component
        self._host = socket.gethostname()

    def event(self, obj: Mapping[str, Any], type: EventType, reason: str, message: str) -> None:
        """Record that ``reason`` (CamelCase) happened to ``obj``, explained by ``message``;
        returns at once (the manager sends it). ``obj`` needs apiVersion and kind, as objects
        from the cache and from `Client.list` have."""
        meta = obj["metadata"]
        stamp = kube_time()
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        self._sink.submit(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{time.time_ns():x}",
                    "namespace": meta.get("namespace") or "default",
                },
                "involvedObject": {k: v for k, v in involved.items() if v},
                "type": type,
                "reason": reason,
                "message": message,
                "source": {"component": self._component, "host": self._host},
                "reportingComponent": self._component,
                "reportingInstance": self._host,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )

    async def flush(self) -> None:
        """Return once every event recorded so far was sent (or dropped)."""
        await self._sink.flush()


def _source_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    involved = event["involvedObject"]
    source = event["source"]
    fields = ("kind", "namespace", "name", "uid", "apiVersion")
    return (source["component"], source.get("host", ""), *(involved.get(f, "") for f in fields))


def _remember(cache: OrderedDict[Any, Any], k: Any, value: Any, limit: int) -> None:
    cache[k] = value
    cache.move_to_end(k)
    while len(cache) > limit:
        cache.popitem(last=False)
