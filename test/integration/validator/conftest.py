"""Fixtures of the validator's integration tests: a mesh injector (the template ConfigMap and
the RuntimeClasses are in ../conftest.py, shared with the webhook's tests).

`mesh_injector` stands in for Istio's sidecar injector (`gpuctrl.testing.MeshInjector`): a
real mutating admission webhook that adds a never-exiting ``istio-proxy`` container to every
pod created in the test's namespace - unless the pod carries Istio's opt-out label
``sidecar.istio.io/inject: "false"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from kubernetes_asyncio.client import ApiClient

from gpuctrl.testing import MeshInjector


@pytest_asyncio.fixture(loop_scope="session")
async def mesh_injector(kube_api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    """Injects a never-exiting sidecar into the namespace's pods; yields the injected pods' names
    (generateName prefixes for pods created with one)."""
    async with MeshInjector(kube_api, name=f"istio-sidecar-injector-{namespace}") as mesh:
        await mesh.enable(namespace)
        yield mesh.injected
