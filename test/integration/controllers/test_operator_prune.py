"""The operand controllers prune only what gpuctrl made for the honoured ClusterPolicy: a
user's ConfigMap in the operands' namespace that carries a component's labels (a common Helm
label, or gpuctrl's own copied) survives every reconcile (issue 22)."""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import CONFIG_MAPS, POLICIES, conditions, policy, running_manager, status_of

from gpuctrl.runtime import Client
from gpuctrl.testing import ControlPlane, eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "gpuctrl"
DRIVER = {"app.kubernetes.io/component": "driver"}
GPUCTRL = {**DRIVER, "app.kubernetes.io/managed-by": "gpuctrl"}


def config_map(name: str, labels: dict[str, str], owner: dict[str, Any] | None = None) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {"metadata": meta, "data": {"mirror.list": "deb http://mirror.example.com/ubuntu\n"}}


async def test_a_users_config_map_with_the_driver_label_survives_the_reconciles(
    cluster: ControlPlane, client: Client
) -> None:
    namespaces = await client.resource("v1", "Namespace")
    await client.create(namespaces, {"metadata": {"name": NAMESPACE}})
    owner = await client.create(POLICIES, policy("cluster"))
    await client.create(CONFIG_MAPS, config_map("helm-repo-config", DRIVER))
    await client.create(CONFIG_MAPS, config_map("copied-labels", GPUCTRL))
    await client.create(CONFIG_MAPS, config_map("gpuctrl-driver-stale", GPUCTRL, owner))
    async with running_manager(cluster.kubeconfig, NAMESPACE):

        async def names() -> set[str]:
            return {c["metadata"]["name"] for c in await client.list(CONFIG_MAPS, NAMESPACE)}

        async def pruned() -> None:  # gpuctrl's own object, no longer rendered, goes
            assert "gpuctrl-driver-stale" not in await names()
            found = conditions(await status_of(client, "cluster"))
            assert found.get("DriverReady", {}).get("reason") == "NoGPUNodes", found

        await eventually(pruned, within=60)
        assert {"helm-repo-config", "copied-labels"} <= await names()
