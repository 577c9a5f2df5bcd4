"""The example controller in README.md works as printed."""

from collections.abc import Callable
from typing import Any

import pytest
from runtime_helpers import CONFIGMAPS, configmap, get_or_none, running

from gpuctrl.runtime import Client, Manager
from gpuctrl.testing import ControlPlane, eventually

pytestmark = pytest.mark.controlplane

HEADING = "## Write a controller with gpuctrl.runtime"


async def mirrored(client: Client, namespace: str, name: str, data: dict[str, str]) -> bool:
    mirror = await get_or_none(client, CONFIGMAPS, f"{name}-mirror", namespace)
    return mirror is not None and mirror.get("data") == data


async def test_readme_example_controller(
    readme_example: Callable[[str], dict[str, Any]],
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
) -> None:
    example = readme_example(HEADING)
    assert len(example["__source__"].splitlines()) <= 45
    await client.create(CONFIGMAPS, configmap("early", namespace, {"mirror": "true"}, a="1"))
    await client.create(CONFIGMAPS, configmap("ignored", namespace, b="2"))
    manager = await Manager.create(control_plane.kubeconfig, http_port=0, http_host="127.0.0.1")
    example["setup"](manager)
    async with running(manager):
        await eventually(lambda: mirrored(client, namespace, "early", {"a": "1"}))
        await client.create(CONFIGMAPS, configmap("late", namespace, {"mirror": "true"}, c="3"))
        await eventually(lambda: mirrored(client, namespace, "late", {"c": "3"}))
        await client.merge_patch(CONFIGMAPS, "late-mirror", {"data": {"c": "tampered"}}, namespace)
        await eventually(lambda: mirrored(client, namespace, "late", {"c": "3"}))
        mirror = await client.get(CONFIGMAPS, "late-mirror", namespace)
        assert mirror["metadata"]["ownerReferences"][0]["name"] == "late"
    assert await get_or_none(client, CONFIGMAPS, "ignored-mirror", namespace) is None
