"""Fixtures for the gpuctrl.runtime integration tests (helpers are in runtime_helpers.py)."""

from collections.abc import AsyncIterator

import pytest_asyncio
from runtime_helpers import GIZMOS, WIDGETS, install_crd

from gpuctrl.runtime import Client, Resource, new_api_client
from gpuctrl.testing import ControlPlane


@pytest_asyncio.fixture(loop_scope="session")
async def client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    """A gpuctrl `Client` as cluster admin, for the test's own reads and writes."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        yield Client(api)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def widget_crd(control_plane: ControlPlane) -> Resource:
    """The namespaced Widget custom resource (with a status subresource), installed once."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        return await install_crd(Client(api), WIDGETS)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def gizmo_crd(control_plane: ControlPlane) -> Resource:
    """The cluster-scoped Gizmo custom resource, installed once."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        return await install_crd(Client(api), GIZMOS)
