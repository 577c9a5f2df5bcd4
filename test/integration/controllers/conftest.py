"""Fixtures of the operator's integration tests: one control plane per module, with an audit
log (helpers are in operator_helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from operator_helpers import install_crds

from gpuctrl.runtime import Client, new_api_client
from gpuctrl.testing import ControlPlane


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster() -> AsyncIterator[ControlPlane]:
    """A control plane of the module's own (controller-manager, scheduler, audit log on), so
    no other test's ClusterPolicy or Node can change what the operator honours here."""
    async with ControlPlane(controller_manager=True, scheduler=True, audit=True) as plane:
        yield plane


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(cluster: ControlPlane) -> AsyncIterator[Client]:
    """An admin `Client` on the module's cluster, gpuctrl's CRDs installed."""
    async with await new_api_client(cluster.kubeconfig) as api:
        admin = Client(api)
        await install_crds(admin)
        yield admin
