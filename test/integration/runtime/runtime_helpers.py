"""Helpers for the gpuctrl.runtime integration tests (real kube-apiserver from gpuctrl.testing).

A module of its own (not conftest.py) so that test modules can import it by a unique name."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gpuctrl.runtime import ApiError, Client, Manager, NotFound, Resource
from gpuctrl.testing import eventually

CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")
CRDS = Resource(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
WIDGETS = Resource("test.gpuctrl.dev/v1", "Widget", "widgets")
GIZMOS = Resource("test.gpuctrl.dev/v1", "Gizmo", "gizmos", namespaced=False)


def crd_manifest(resource: Resource) -> dict[str, Any]:
    """A CustomResourceDefinition serving ``resource`` (schemaless, with a status subresource)."""
    group, _, version = resource.api_version.partition("/")
    kind = resource.kind
    names = {"kind": kind, "plural": resource.plural, "singular": kind.lower()}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{group}"},
        "spec": {
            "group": group,
            "names": {**names, "listKind": f"{kind}List"},
            "scope": "Namespaced" if resource.namespaced else "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def configmap(
    name: str, namespace: str, labels: dict[str, str] | None = None, **data: str
) -> dict[str, Any]:
    """A ConfigMap manifest."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


@asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[Manager]:
    """Run ``manager`` in the background until the block ends (then stop it cleanly)."""
    stop = asyncio.Event()
    task = asyncio.create_task(manager.start(stop))
    try:
        await eventually(lambda: manager.ready() or task.done(), within=30)
        if task.done():
            task.result()
        yield manager
    finally:
        stop.set()
        await task


async def get_or_none(client: Client, resource: Resource, name: str, namespace: str) -> Any:
    """The object, or None when it does not exist."""
    try:
        return await client.get(resource, name, namespace)
    except NotFound:
        return None


async def install_crd(admin: Client, resource: Resource) -> Resource:
    """Install the CRD serving ``resource`` and wait until its API answers; return it."""
    manifest = crd_manifest(resource)
    await admin.apply(CRDS, manifest, field_manager="test", force=True)

    async def established() -> bool:
        crd = await admin.get(CRDS, manifest["metadata"]["name"])
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    async def served() -> bool:
        try:
            await admin.list(resource, "default" if resource.namespaced else None)
        except ApiError:  # 404 until the API is registered, or 503 while it is being served
            return False
        return True

    await eventually(established, within=60)
    await eventually(served, within=60)
    return resource
