"""A small dynamic client on kubernetes-asyncio's ``ApiClient``: raw JSON in and out.

Every call goes through ``ApiClient.call_api`` (so kubeconfig, in-cluster and exec/token
authentication all work as in kubernetes-asyncio) with ``_preload_content=False`` and a
client-side timeout, and decodes the body with ``json.loads`` into plain dicts: no generated
model classes, which are several times slower to build. Error statuses become the classes of
``gpuctrl.runtime._errors`` with the response's Status message in the text.

Like client-go's REST client it can pace itself (``qps``/``burst``, off by default as in
controller-runtime >= 0.21, which relies on API Priority and Fairness), waits out a 429 (or 503)
that carries ``Retry-After`` and tries again (at most ``max_retries`` times), and counts every
answer in ``rest_client_requests_total{code,host,method}``.
"""

from __future__ import annotations

import json
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio import client as k8s_client
from prometheus_client import Counter

from ._clock import Clock, SystemClock
from ._errors import AlreadyExists, ApiError, Conflict, api_error
from ._jitter import jittered
from ._listjson import ListParser, read_list
from ._metrics import METRICS_REGISTRY
from ._ratelimiter import BucketRateLimiter
from ._resources import Resource

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "METADATA_ONLY", "Client", "retry_on_conflict"]

DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds any single request may take (kubernetes-asyncio's default is: forever)."""

METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""The ``Accept`` header asking for a list of metadata only (PartialObjectMetadataList)."""
_METADATA_ONLY_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
_JSON = "application/json"
_APPLY_PATCH = "application/apply-patch+yaml"
_MERGE_PATCH = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_PAGE_SIZE = 500
# Bytes of a list body decoded at a time: what is buffered may be megabytes when the server sends
# faster than the items are stored; blocks that big, freed, stay in the heap as holes.
_LIST_CHUNK = 1 << 16
_RETRY_AFTER_CAP = 60.0  # seconds: a longer Retry-After is waited out in steps of this

_REQUESTS = Counter(
    "rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "host", "method"],
    registry=METRICS_REGISTRY,
)

Query = Mapping[str, str | int | bool]
PropagationPolicy = Literal["Foreground", "Background", "Orphan"]


class Client:
    """Get, list, watch, create, apply, update and delete objects of any `Resource` as dicts.

    Wraps an ``ApiClient`` it does not own; every request is bounded by ``request_timeout``.
    ``qps``/``burst`` (None: unlimited) pace requests through a token bucket on ``clock``,
    which also times the waits after a 429 with ``Retry-After``.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        qps: float | None = None,
        burst: int = 10,
        max_retries: int = 10,
        clock: Clock | None = None,
    ) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._bucket = None if qps is None else BucketRateLimiter(qps, burst, clock=self._clock)
        self._max_retries = max_retries
        self._host = urlsplit(api_client.configuration.host).netloc
        self._discovered: dict[str, dict[str, Resource]] = {}

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = _JSON,
    ) -> Any:
        """Send one request and return the decoded JSON body; error statuses raise `ApiError`."""
        async with self._open(method, path, query, body, content_type, _JSON, None) as response:
            data = await response.read()
        return json.loads(data) if data else None

    async def read(self, path: str, query: Query, *, accept: str = _JSON) -> bytes:
        """GET ``path`` and return the undecoded body; error statuses raise `ApiError`."""
        async with self._open("GET", path, query, None, _JSON, accept, None) as response:
            return await response.read()

    async def pages(
        self, path: str, query: Query, *, accept: str = _JSON
    ) -> AsyncIterator[tuple[dict[str, Any], Iterator[dict[str, Any]]]]:
        """Each page of a list as (list metadata, its items), following ``continue`` tokens.
        A ``limit`` in ``query`` sets the page size; without one the server answers in one
        piece (`list_batches` decodes that piece while it arrives)."""
        query = dict(query)
        while True:
            meta, items = read_list((await self.read(path, query, accept=accept)).decode())
            yield meta, items
            if not meta.get("continue"):
                return
            query = _next_page(query, meta)

    async def list_batches(
        self, path: str, query: Query, *, accept: str = _JSON
    ) -> AsyncIterator[tuple[dict[str, Any], Iterator[dict[str, Any]]]]:
        """The items of a list in batches, one per network chunk, each an iterator decoding
        one item per step (exhaust it before asking for the next batch), page after page
        (following ``continue`` tokens); with each its page's list metadata, a dict filled in
        once read (the API server writes it first). A page's last batch (possibly empty) comes
        once its body ended. The whole body is never held at once (see `_listjson`)."""
        query = dict(query)
        while True:
            parser = ListParser()
            async with self._open("GET", path, query, None, _JSON, accept, None) as response:
                async for chunk in response.content.iter_chunked(_LIST_CHUNK):
                    yield parser.metadata, parser.feed(chunk)
            yield parser.metadata, parser.close()
            if not parser.metadata.get("continue"):
                return
            query = _next_page(query, parser.metadata)

    @asynccontextmanager
    async def stream(
        self, path: str, query: Query, limits: aiohttp.ClientTimeout, *, accept: str = _JSON
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a streaming GET (a watch); the response is released when the block exits."""
        async with self._open("GET", path, query, None, _JSON, accept, limits) as response:
            yield response

    async def watch(
        self,
        path: str,
        query: Query,
        limits: aiohttp.ClientTimeout,
        *,
        metadata_only: bool = False,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The events (``{"type": ..., "object": ...}``) of a watch on ``path`` (``watch=true``
        is added) until the server ends it; an ERROR event raises its `ApiError` (`Gone`: the
        resourceVersion is too old). Iterate it inside ``contextlib.aclosing`` so that leaving
        the loop early releases the connection at once."""
        accept = _METADATA_ONLY_WATCH if metadata_only else _JSON
        async with self.stream(path, {**query, "watch": True}, limits, accept=accept) as response:
            pending = b""
            async for chunk in response.content.iter_any():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event: dict[str, Any] = json.loads(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        code, reason = status.get("code"), status.get("reason", "")
                        raise api_error(SimpleNamespace(status=code, reason=reason, body=status))
                    yield event

    @asynccontextmanager
    async def _open(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Any,
        content_type: str,
        accept: str,
        limits: aiohttp.ClientTimeout | None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        params = [(k, _query_value(v)) for k, v in (query or {}).items()]
        for attempt in range(self._max_retries + 1):
            if self._bucket is not None:
                await self._clock.sleep(self._bucket.when(None))
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                path,
                method,
                query_params=params,
                header_params={"Accept": accept, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=limits or self.request_timeout,
            )
            async with response:
                _REQUESTS.labels(str(response.status), self._host, method).inc()
                wait = _retry_after(response) if attempt < self._max_retries else None
                if wait is None:
                    if response.status >= 300:
                        raise _error_from(response, await response.read())
                    yield response
                    return
            await self._clock.sleep(wait)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        """Read one object (raises `NotFound` when absent)."""
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> list[dict[str, Any]]:
        """Every object matching the selectors (a consistent read, paged by the server), each
        with its ``apiVersion`` and ``kind`` (list responses leave them out of their items).
        ``metadata_only`` reads PartialObjectMetadata (metadata, apiVersion and kind)."""
        query: dict[str, str | int | bool] = {"limit": _PAGE_SIZE}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        accept = METADATA_ONLY if metadata_only else _JSON
        items: list[dict[str, Any]] = []
        async for _, page in self.pages(resource.path(namespace), query, accept=accept):
            items.extend(typed(page, resource))
        return items

    async def create(self, resource: Resource, obj: Mapping[str, Any]) -> Any:
        """Create ``obj`` (raises `AlreadyExists` when it exists)."""
        return await self.request("POST", resource.path(_namespace(obj)), body=obj)

    async def replace(self, resource: Resource, obj: Mapping[str, Any], *, sub: str = "") -> Any:
        """PUT ``obj`` (or its subresource ``sub``); its resourceVersion makes it a compare-and-
        swap that raises `Conflict` when the object changed meanwhile."""
        path = resource.path(_namespace(obj), obj["metadata"]["name"], sub)
        return await self.request("PUT", path, body=obj)

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        sub: str = "",
    ) -> Any:
        """Apply a JSON merge patch (RFC 7386) to one object or its subresource."""
        path = resource.path(namespace, name, sub)
        return await self.request("PATCH", path, body=patch, content_type=_MERGE_PATCH)

    async def json_patch(
        self,
        resource: Resource,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        *,
        sub: str = "",
    ) -> Any:
        """Apply a JSON patch (RFC 6902) to one object or its subresource; a failed ``test``
        operation is refused with `Invalid` (422) and changes nothing."""
        path = resource.path(namespace, name, sub)
        return await self.request("PATCH", path, body=list(operations), content_type=_JSON_PATCH)

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = False,
        sub: str = "",
    ) -> Any:
        """Server-side apply ``obj`` (fully specified intent) as ``field_manager``.

        Raises `Conflict` when another manager owns a field being changed, unless ``force``.
        ``sub="status"`` applies to the status subresource.
        """
        path = resource.path(_namespace(obj), obj["metadata"]["name"], sub)
        query: dict[str, str | int | bool] = {"fieldManager": field_manager}
        if force:
            query["force"] = True
        return await self.request("PATCH", path, query=query, body=obj, content_type=_APPLY_PATCH)

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        missing_ok: bool = True,
        propagation_policy: PropagationPolicy | None = None,
        uid: str | None = None,
    ) -> None:
        """Delete one object; an absent one is fine unless ``missing_ok`` is False.

        ``propagation_policy`` says what happens to its dependents (the server's default for
        the kind when None); ``uid`` deletes only that incarnation of the name (`Conflict`
        when the object was replaced by another with the same name).
        """
        options: dict[str, Any] = {}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", resource.path(namespace, name), body=options or None)
        except ApiError as error:
            if not (missing_ok and error.status == 404):
                raise

    async def resource(self, api_version: str, kind: str) -> Resource:
        """Look up the `Resource` serving ``kind`` in ``api_version`` through discovery (cached)."""
        if api_version not in self._discovered:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = await self.request("GET", path)
            self._discovered[api_version] = {
                r["kind"]: Resource(api_version, r["kind"], r["name"], r["namespaced"])
                for r in listing["resources"]
                if "/" not in r["name"]
            }
        served = self._discovered[api_version].get(kind)
        if served is None:
            del self._discovered[api_version]  # ask again next time: a CRD may arrive later
            raise ValueError(f"the API server serves no kind {kind!r} in {api_version}")
        return served


def _next_page(query: Query, meta: Mapping[str, Any]) -> dict[str, str | int | bool]:
    """The query of the page after the one whose list metadata is ``meta``."""
    return {**query, "limit": query.get("limit", _PAGE_SIZE), "continue": meta["continue"]}


def typed(items: Iterable[dict[str, Any]], resource: Resource) -> Iterator[dict[str, Any]]:
    """Items of a list with apiVersion and kind filled in: list responses leave them out, and a
    metadata-only list calls every item a PartialObjectMetadata."""
    for item in items:
        item["apiVersion"] = resource.api_version
        item["kind"] = resource.kind
        yield item


T = TypeVar("T")


async def retry_on_conflict(
    attempt: Callable[[], Awaitable[T]],
    *,
    attempts: int = 5,
    delay: float = 0.01,
    max_delay: float = 1.0,
    clock: Clock | None = None,
) -> T:
    """Run a read-modify-write ``attempt`` again while it raises `Conflict` (not
    `AlreadyExists`), at most ``attempts`` times, waiting ``delay`` s on ``clock`` before the
    second try and twice as long before each next one (jittered, at most ``max_delay`` or
    ``delay`` if longer), as
    client-go's exponential backoff: writers racing for one object spread out instead of
    colliding again. The last `Conflict` propagates.

    ``attempt`` must read the object afresh each time, or it will conflict forever.
    """
    sleeper: Clock = clock if clock is not None else SystemClock()
    for step in range(attempts - 1):
        try:
            return await attempt()
        except AlreadyExists:
            raise
        except Conflict:
            await sleeper.sleep(jittered(min(delay * 2**step, max(delay, max_delay))))
    return await attempt()


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    """Seconds to wait before sending the request again: a 429 or 503 with ``Retry-After``."""
    if response.status not in (429, 503):
        return None
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), _RETRY_AFTER_CAP)


def _namespace(obj: Mapping[str, Any]) -> str | None:
    namespace: str | None = obj["metadata"].get("namespace")
    return namespace


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error_from(response: aiohttp.ClientResponse, body: bytes) -> ApiError:
    return api_error(SimpleNamespace(status=response.status, reason=response.reason, body=body))
