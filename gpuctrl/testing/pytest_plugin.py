"""pytest fixtures for code built on gpuctrl; a project opts in with one line in its top-level
``conftest.py``: ``pytest_plugins = ["gpuctrl.testing.pytest_plugin"]``.

- `control_plane` (session): a `ControlPlane` with controller-manager and scheduler.
- `kube_api`: an admin `ApiClient`, closed after the test.
- `namespace`: a fresh namespace (its `default` ServiceAccount ready), deleted after the test.
- `gpu_nodes`: a `SimulatedKubelet` with GPU nodes named uniquely for the test (default: two,
  Ubuntu 22.04 and 24.04), their Nodes deleted after the test. Ask for others with
  ``@pytest.mark.gpu_nodes(count=3, os_releases=[("rhel", "9.4")], gpus=8)``
  (the keyword arguments of `simulated_gpu_nodes`).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from gpuctrl.runtime import new_api_client

from ._controlplane import ControlPlane
from ._kubelet import SimulatedKubelet
from ._nodes import simulated_gpu_nodes

_SERVICE_ACCOUNT_TIMEOUT_SECONDS = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpu_nodes(**kwargs): the nodes of the gpu_nodes fixture "
        "(keyword arguments of gpuctrl.testing.simulated_gpu_nodes)",
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def control_plane() -> AsyncIterator[ControlPlane]:
    """One control plane (etcd, apiserver, controller-manager, scheduler) for the session."""
    async with ControlPlane(controller_manager=True, scheduler=True) as plane:
        yield plane


@pytest_asyncio.fixture
async def kube_api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """An `ApiClient` authenticated as cluster admin; closed after the test."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        yield api


@pytest_asyncio.fixture
async def namespace(
    request: pytest.FixtureRequest, control_plane: ControlPlane, kube_api: ApiClient
) -> AsyncIterator[str]:
    """The name of a new namespace for this test, deleted (not awaited) afterwards."""
    core = client.CoreV1Api(kube_api)
    name = f"{_dns_label(request.node.name, 50)}-{secrets.token_hex(3)}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    if control_plane.controller_manager:
        await _wait_default_service_account(core, name)
    yield name
    try:
        await core.delete_namespace(name)
    except ApiException as error:
        if error.status != 404:
            raise


@pytest_asyncio.fixture
async def gpu_nodes(
    request: pytest.FixtureRequest, control_plane: ControlPlane
) -> AsyncIterator[SimulatedKubelet]:
    """A running `SimulatedKubelet` with this test's GPU nodes; its Nodes are deleted after."""
    marker = request.node.get_closest_marker("gpu_nodes")
    options = marker.kwargs if marker else {}
    prefix = f"{_dns_label(request.node.name, 40)}-{secrets.token_hex(2)}"
    nodes = simulated_gpu_nodes(prefix, **options)
    async with SimulatedKubelet(control_plane.kubeconfig, nodes) as kubelet:
        yield kubelet


async def _wait_default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    """With the ServiceAccount admission plugin on, pods need this account and its token."""
    async with asyncio.timeout(_SERVICE_ACCOUNT_TIMEOUT_SECONDS):
        while True:
            try:
                await core.read_namespaced_service_account("default", namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
            else:
                return
            await asyncio.sleep(0.05)


def _dns_label(text: str, limit: int) -> str:
    """`text` lowercased and squeezed into a DNS label of at most `limit` characters."""
    label = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return label or "test"
