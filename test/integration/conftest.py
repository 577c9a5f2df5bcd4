"""Fixtures of the integration tests: the generated CRDs (session-wide), the RuntimeClasses
the operator would create and the validator's template ConfigMap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from api.crdgen import crd_files
from gpuctrl.runtime import new_api_client
from gpuctrl.testing import ControlPlane
from gpuctrl.validator import builtin_template

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


CONFIGMAP = "gpuctrl-validator-workloads"


# The runtime classes the tests' pods name; the apiserver refuses pods naming a missing one.
RUNTIME_CLASSES = ("nvidia", "nvidia-legacy")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def runtime_classes(control_plane: ControlPlane) -> AsyncIterator[tuple[str, ...]]:
    """The RuntimeClasses the operator would create, for one test module: they are
    cluster-scoped, and other tests (render -> create) create ones of the same names."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        node = client.NodeV1Api(api)
        for name in RUNTIME_CLASSES:
            await node.create_runtime_class({"metadata": {"name": name}, "handler": name})
        yield RUNTIME_CLASSES
        for name in RUNTIME_CLASSES:
            await node.delete_runtime_class(name)


@pytest_asyncio.fixture(loop_scope="session")
async def workload_templates(
    kube_api: ApiClient, namespace: str, runtime_classes: tuple[str, ...]
) -> str:
    """The built-in templates in the ConfigMap the agent reads by default; returns its name."""
    data = {key: builtin_template(key) for key in ("cuda.yaml", "plugin.yaml")}
    await client.CoreV1Api(kube_api).create_namespaced_config_map(
        namespace, {"metadata": {"name": CONFIGMAP}, "data": data}
    )
    return CONFIGMAP
