"""The node labeller against the real apiserver, from a hand-filled cache: a label an admin
changed after the cache was read is never overwritten (issue 22)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from controllers._kinds import CLUSTER_POLICIES, NODES
from controllers._reads import TRANSFORMS, informer
from controllers.nodes import NodeLabeller
from gpuctrl.runtime import Cache, Client, Conflict, Request, new_api_client
from gpuctrl.testing import ControlPlane

NFD_GPU = "feature.node.kubernetes.io/pci-10de.present"
PRESENT = "nvidia.com/gpu.present"
DRIVER = "nvidia.com/gpu.deploy.driver"


def honoured_policy() -> dict[str, Any]:
    meta = {"name": "cluster", "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy", "metadata": meta}


async def test_a_label_changed_after_the_cache_read_is_not_overwritten(
    control_plane: ControlPlane,
) -> None:
    async with await new_api_client(control_plane.kubeconfig) as api:
        await labelled_with_a_precondition(Client(api))


async def labelled_with_a_precondition(client: Client) -> None:
    name = f"gpu-{secrets.token_hex(3)}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {NFD_GPU: "true"}},
    }
    read = await client.create(NODES, node)
    try:
        cache = Cache(client)
        informer(cache, CLUSTER_POLICIES, "gpuctrl").replace([honoured_policy()])
        nodes = informer(cache, NODES, "gpuctrl")
        nodes.replace([TRANSFORMS[NODES](read)])
        # After the cache read, an admin keeps the driver off this node.
        await client.merge_patch(NODES, name, {"metadata": {"labels": {DRIVER: "false"}}})
        labeller = NodeLabeller(cache, client, "gpuctrl")
        with pytest.raises(Conflict):
            await labeller(Request("", name))
        labels = (await client.get(NODES, name))["metadata"]["labels"]
        assert labels[DRIVER] == "false", "the admin's label survives"
        assert PRESENT not in labels, "nothing of the stale write was made"
        # The retry reads the newer Node: labelled, the admin's value kept.
        nodes.replace([TRANSFORMS[NODES](await client.get(NODES, name))])
        await labeller(Request("", name))
        labels = (await client.get(NODES, name))["metadata"]["labels"]
        assert (labels[PRESENT], labels[DRIVER]) == ("true", "false")
    finally:
        await client.delete(NODES, name)
