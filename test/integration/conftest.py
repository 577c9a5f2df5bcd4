"""Fixtures of the integration tests: the generated CRDs, installed (session-wide)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from api.crdgen import crd_files
from gpuctrl.runtime import new_api_client
from gpuctrl.testing import ControlPlane

_ESTABLISHED_TIMEOUT_SECONDS = 30.0


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def crds(control_plane: ControlPlane) -> AsyncIterator[list[dict[str, Any]]]:
    """gpuctrl's CRDs, as generated from the models, installed and Established."""
    installed = [yaml.safe_load(text) for text in crd_files().values()]
    async with await new_api_client(control_plane.kubeconfig) as api:
        extensions = client.ApiextensionsV1Api(api)
        for crd in installed:
            await _create_or_replace(extensions, crd)
        for crd in installed:
            await _wait_established(extensions, crd["metadata"]["name"])
    yield installed


async def _create_or_replace(extensions: client.ApiextensionsV1Api, crd: dict[str, Any]) -> None:
    try:
        await extensions.create_custom_resource_definition(crd)
    except ApiException as error:
        if error.status != 409:
            raise
        current = await extensions.read_custom_resource_definition(crd["metadata"]["name"])
        body = {
            **crd,
            "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        await extensions.replace_custom_resource_definition(crd["metadata"]["name"], body)


async def _wait_established(extensions: client.ApiextensionsV1Api, name: str) -> None:
    async with asyncio.timeout(_ESTABLISHED_TIMEOUT_SECONDS):
        while True:
            crd = await extensions.read_custom_resource_definition(name)
            conditions = crd.status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            await asyncio.sleep(0.05)
