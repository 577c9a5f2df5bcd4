"""Fixtures of the validator's integration tests: a mesh injector (the template ConfigMap and
the RuntimeClasses are in ../conftest.py, shared with the webhook's tests).

`mesh_injector` stands in for Istio's sidecar injector (`gpuctrl.testing.MeshInjector`): a
real mutating admission webhook that adds a never-exiting ``istio-proxy`` to every pod created
in the test's namespace - unless the pod carries Istio's opt-out label
``sidecar.istio.io/inject: "false"``. The proxy is a container; parametrized indirectly with
``"native"`` (``@pytest.mark.parametrize("mesh_injector", ["native"], indirect=True)``), it is
a native sidecar (an init container with ``restartPolicy: Always``), as with Istio's
``ENABLE_NATIVE_SIDECARS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kubernetes_asyncio.client import ApiClient

from gpuctrl.testing import MeshInjector


@pytest_asyncio.fixture(loop_scope="session")
async def mesh_injector(
    request: pytest.FixtureRequest, kube_api: ApiClient, namespace: str
) -> AsyncIterator[MeshInjector]:
    """Istio's injector, on for the namespace: "classic" (the default) or "native" (see the
    module docstring); its `MeshInjector.injected` names the pods it changed."""
    mode = getattr(request, "param", "classic")
    assert mode in ("classic", "native"), mode
    async with MeshInjector(
        kube_api, name=f"istio-sidecar-injector-{namespace}", native_sidecar=mode == "native"
    ) as mesh:
        await mesh.enable(namespace)
        yield mesh
