"""JSON requests over an `ApiClient`'s connection pool and credentials, without model classes.

The simulated kubelet sends thousands of requests; building and parsing kubernetes-asyncio's
model objects would cost more than the requests themselves.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

__all__ = ["MERGE_PATCH", "RawApi"]

MERGE_PATCH = "application/merge-patch+json"
_JSON = "application/json"


class RawApi:
    """Requests taking and returning JSON dicts, at most `concurrency` at a time.

    Errors: ApiException for a non-2xx answer (its `status` and `body` set); aiohttp's and the
    OS's errors when the apiserver cannot be reached.
    """

    def __init__(self, api: ApiClient, *, concurrency: int) -> None:
        self._api = api
        self._limit = asyncio.Semaphore(concurrency)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = _JSON,
    ) -> dict[str, Any]:
        """Send one request and return the decoded JSON answer."""
        async with self._limit:
            response = await self._send(method, path, query, body, content_type)
            async with response:
                data = await response.read()
        _check(response.status, data)
        result: dict[str, Any] = json.loads(data)
        return result

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch on `path` (`watch=true` is added), until the server ends it."""
        response = await self._send("GET", path, {**query, "watch": "true"}, None, _JSON)
        async with response:
            if response.status != 200:
                _check(response.status, await response.read())
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)

    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            header_params={"Accept": _JSON, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        return response


def _check(status: int, data: bytes) -> None:
    if not 200 <= status < 300:
        error = ApiException(status=status, reason=_reason(data))
        error.body = data
        raise error


def _reason(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message", ""))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
