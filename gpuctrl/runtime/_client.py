"""A small dynamic client on kubernetes-asyncio's ``ApiClient``: raw JSON in and out.

Every call goes through ``ApiClient.call_api`` (so kubeconfig, in-cluster and exec/token
authentication all work as in kubernetes-asyncio) with ``_preload_content=False`` and a
client-side timeout, and decodes the body with ``json.loads`` into plain dicts: no generated
model classes, which are several times slower to build. Error statuses become the classes of
``gpuctrl.runtime._errors`` with the response's Status message in the text.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from ._errors import AlreadyExists, ApiError, Conflict, api_error

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "Client",
    "Resource",
    "new_api_client",
    "retry_on_conflict",
    "set_controller_reference",
]

DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds any single request may take (kubernetes-asyncio's default is: forever)."""

_APPLY_PATCH = "application/apply-patch+yaml"
_MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: ``Resource("apps/v1", "Deployment", "deployments")``.

    ``api_version`` is ``group/version`` (``v1`` for the core group), ``plural`` the URL name.
    """

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The URL path of the collection, or of one object (and its subresource ``sub``)."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        return f"{base}/{sub}" if sub else base


async def new_api_client(
    kubeconfig: str | Path | None = None,
    *,
    configuration: k8s_client.Configuration | None = None,
    context: str | None = None,
) -> k8s_client.ApiClient:
    """Build an ``ApiClient``: from ``configuration`` if given, else from ``kubeconfig``, else
    in-cluster when running in a pod, else from ``$KUBECONFIG`` / ``~/.kube/config``.

    The caller owns the client and must ``await client.close()``.
    """
    if configuration is None:
        configuration = k8s_client.Configuration()
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig is not None else None,
                context=context,
                client_configuration=configuration,
            )
    return k8s_client.ApiClient(configuration)


class Client:
    """Get, list, watch, create, apply, update and delete objects of any `Resource` as dicts.

    Wraps an ``ApiClient`` it does not own; every request is bounded by ``request_timeout``.
    """

    def __init__(
        self, api_client: k8s_client.ApiClient, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        self._discovered: dict[str, dict[str, Resource]] = {}

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request and return the decoded JSON body; error statuses raise `ApiError`."""
        async with self._open(method, path, query, body, content_type, None) as response:
            data = await response.read()
        return json.loads(data) if data else None

    async def read(self, path: str, query: Mapping[str, str | int | bool]) -> bytes:
        """GET ``path`` and return the undecoded body; error statuses raise `ApiError`."""
        async with self._open("GET", path, query, None, "application/json", None) as response:
            return await response.read()

    @asynccontextmanager
    async def stream(
        self, path: str, query: Mapping[str, str | int | bool], limits: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a streaming GET (a watch); the response is released when the block exits."""
        async with self._open("GET", path, query, None, "application/json", limits) as response:
            yield response

    async def watch(
        self, path: str, query: Mapping[str, str | int | bool], limits: aiohttp.ClientTimeout
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The events (``{"type": ..., "object": ...}``) of a watch on ``path`` (``watch=true``
        is added) until the server ends it; an ERROR event raises its `ApiError` (`Gone`: the
        resourceVersion is too old). Iterate it inside ``contextlib.aclosing`` so that leaving
        the loop early releases the connection at once."""
        async with self.stream(path, {**query, "watch": True}, limits) as response:
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
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str,
        limits: aiohttp.ClientTimeout | None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        params = [(k, _query_value(v)) for k, v in (query or {}).items()]
        response: aiohttp.ClientResponse = await self.api_client.call_api(
            path,
            method,
            query_params=params,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=limits or self.request_timeout,
        )
        async with response:
            if response.status >= 300:
                raise _error_from(response, await response.read())
            yield response

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
    ) -> list[dict[str, Any]]:
        """Every object matching the selectors (a consistent read, paged by the server)."""
        query: dict[str, str | int | bool] = {"limit": 500}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        items: list[dict[str, Any]] = []
        while True:
            page = await self.request("GET", resource.path(namespace), query=query)
            items.extend(page["items"])
            if not page["metadata"].get("continue"):
                return items
            query["continue"] = page["metadata"]["continue"]

    async def create(self, resource: Resource, obj: Mapping[str, Any]) -> Any:
        """Create ``obj`` (raises `AlreadyExists` when it exists)."""
        return await self.request("POST", resource.path(_namespace(obj)), body=obj)

    async def replace(self, resource: Resource, obj: Mapping[str, Any], *, sub: str = "") -> Any:
        """PUT ``obj`` (or its subresource ``sub``); its resourceVersion makes it a compare-and-
        swap that raises `Conflict` when the object changed meanwhile."""
        path = resource.path(_namespace(obj), obj["metadata"]["name"], sub)
        return await self.request("PUT", path, body=obj)

    async def update_status(self, resource: Resource, obj: Mapping[str, Any]) -> Any:
        """Write ``obj["status"]`` through the status subresource (a compare-and-swap)."""
        return await self.replace(resource, obj, sub="status")

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
    ) -> None:
        """Delete one object; an absent one is fine unless ``missing_ok`` is False."""
        try:
            await self.request("DELETE", resource.path(namespace, name))
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
        try:
            return self._discovered[api_version][kind]
        except KeyError:
            raise ValueError(f"the API server serves no kind {kind!r} in {api_version}") from None


def set_controller_reference(owner: Mapping[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """Make ``owner`` the controller of ``obj`` (mutating and returning ``obj``).

    Raises ``ValueError`` when ``obj`` already has a different controller, or when a namespaced
    owner is in another namespace than ``obj`` (the garbage collector would delete ``obj``).
    """
    meta = owner["metadata"]
    owner_ns = meta.get("namespace")
    if owner_ns and owner_ns != obj["metadata"].get("namespace"):
        raise ValueError(
            f"owner {owner['kind']} {owner_ns}/{meta['name']} cannot own an object in namespace "
            f"{obj['metadata'].get('namespace')!r}"
        )
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    references = [dict(r) for r in obj["metadata"].get("ownerReferences", ())]
    for i, ref in enumerate(references):
        if ref.get("controller") and ref["uid"] != meta["uid"]:
            raise ValueError(
                f"{obj['metadata']['name']} is already controlled by {ref['kind']} {ref['name']}"
            )
        if ref["uid"] == meta["uid"]:
            references[i] = reference
            break
    else:
        references.append(reference)
    obj["metadata"]["ownerReferences"] = references
    return obj


T = TypeVar("T")


async def retry_on_conflict(
    attempt: Callable[[], Awaitable[T]], *, attempts: int = 5, delay: float = 0.01
) -> T:
    """Run a read-modify-write ``attempt`` again (after ``delay`` s, 10 % jitter) while it raises
    `Conflict` (not `AlreadyExists`), at most ``attempts`` times; the last `Conflict` propagates.

    ``attempt`` must read the object afresh each time, or it will conflict forever.
    """
    for _ in range(attempts - 1):
        try:
            return await attempt()
        except AlreadyExists:
            raise
        except Conflict:
            await asyncio.sleep(delay * (1 + 0.1 * random.random()))
    return await attempt()


def _namespace(obj: Mapping[str, Any]) -> str | None:
    namespace: str | None = obj["metadata"].get("namespace")
    return namespace


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error_from(response: aiohttp.ClientResponse, body: bytes) -> ApiError:
    return api_error(SimpleNamespace(status=response.status, reason=response.reason, body=body))
