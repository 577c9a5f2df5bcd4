"""Fixtures of the validator's integration tests: the template ConfigMap and a mesh injector.

`mesh_injector` stands in for Istio's sidecar injector (`gpuctrl.testing.MeshInjector`): a
real mutating admission webhook that adds a never-exiting ``istio-proxy`` container to every
pod created in the test's namespace - unless the pod carries Istio's opt-out label
``sidecar.istio.io/inject: "false"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from gpuctrl.runtime import new_api_client
from gpuctrl.testing import ControlPlane, MeshInjector
from gpuctrl.validator import builtin_template

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


@pytest_asyncio.fixture(loop_scope="session")
async def mesh_injector(kube_api: ApiClient, namespace: str) -> AsyncIterator[list[str]]:
    """Injects a never-exiting sidecar into the namespace's pods; yields the injected pods' names
    (generateName prefixes for pods created with one)."""
    async with MeshInjector(kube_api, name=f"istio-sidecar-injector-{namespace}") as mesh:
        await mesh.enable(namespace)
        yield mesh.injected
