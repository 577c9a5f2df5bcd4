"""The PodPolicy status controller on the real apiserver."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest

from controllers.podpolicy import POD_POLICIES, setup
from gpuctrl.runtime import Client, Manager
from gpuctrl.testing import ControlPlane, eventually


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


@pytest.mark.usefixtures("crds")
async def test_ready_follows_the_generation_and_no_targets_is_reported(
    control_plane: ControlPlane,
) -> None:
    manager = await Manager.create(
        control_plane.kubeconfig, metrics_bind_address=None, health_probe_bind_address=None
    )
    setup(manager, "gpuctrl")
    stop = asyncio.Event()
    running = asyncio.create_task(manager.start(stop))
    client = manager.client
    name = f"status-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": "PodPolicy",
        "metadata": {"name": name},
        "spec": {"targets": {"components": []}, "meshes": ["istio"]},
    }
    try:
        await client.create(POD_POLICIES, body)

        async def reported(
            generation: int, targeting: str, ready: str = "True"
        ) -> dict[str, dict[str, Any]]:
            found = conditions(await client.get(POD_POLICIES, name))
            assert set(found) == {"Ready", "Targeting"}
            assert found["Ready"]["status"] == ready
            assert found["Ready"]["observedGeneration"] == generation
            assert found["Targeting"]["status"] == targeting
            return found

        first = await eventually(lambda: reported(1, "False"))
        assert first["Targeting"]["reason"] == "NoTargets"
        stored = await client.get(POD_POLICIES, name)
        stored["spec"]["targets"]["components"] = ["validator-workloads"]
        await client.replace(POD_POLICIES, stored)
        await eventually(lambda: reported(2, "True"))
        # a policy that would rewrite the DaemonSets' selector label is refused, by key
        await client.merge_patch(POD_POLICIES, name, {"spec": {"labels": {"app": "other"}}})
        refused = await eventually(lambda: reported(3, "True", ready="False"))
        assert refused["Ready"]["reason"] == "Invalid"
        assert "spec.labels[app]: a PodPolicy may not set 'app'" in refused["Ready"]["message"]
    finally:
        await Client(manager.client.api_client).delete(POD_POLICIES, name)
        stop.set()
        await running
