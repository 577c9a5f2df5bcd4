"""Fixtures for the gpuctrl.runtime integration tests (helpers are in runtime_helpers.py)."""

from collections.abc import AsyncIterator

import pytest_asyncio
from runtime_helpers import CRDS, WIDGET_CRD, WIDGETS, widgets_served

from gpuctrl.runtime import Client, Resource, new_api_client
from gpuctrl.testing import ControlPlane, eventually


@pytest_asyncio.fixture(loop_scope="session")
async def client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    """A gpuctrl `Client` as cluster admin, for the test's own reads and writes."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        yield Client(api)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def widget_crd(control_plane: ControlPlane) -> Resource:
    """The Widget custom resource (with a status subresource), installed once."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        admin = Client(api)
        await admin.apply(CRDS, WIDGET_CRD, field_manager="test", force=True)

        async def established() -> bool:
            crd = await admin.get(CRDS, "widgets.test.gpuctrl.dev")
            conditions = (crd.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await eventually(established, within=60)
        await eventually(lambda: widgets_served(admin), within=60)
    return WIDGETS
