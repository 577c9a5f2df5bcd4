"""The example controller in docs/runtime.md works as printed."""

from collections.abc import Callable
from typing import Any

from runtime_helpers import CONFIGMAPS, configmap, get_or_none, running

from gpuctrl.runtime import Client, Manager
from gpuctrl.testing import ControlPlane, eventually

DOC = "docs/runtime.md"
HEADING = "## A complete controller"


async def mirrored(client: Client, namespace: str, name: str, data: dict[str, str]) -> bool:
    mirror = await get_or_none(client, CONFIGMAPS, f"{name}-mirror", namespace)
    return mirror is not None and mirror.get("data") == data


async def test_the_guide_example_controller(
    doc_example: Callable[[str, str], dict[str, Any]],
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
) -> None:
    example = doc_example(DOC, HEADING)
    assert len(example["__source__"].splitlines()) <= 55
    await client.create(CONFIGMAPS, configmap("early", namespace, {"mirror": "true"}, a="1"))
    await client.create(CONFIGMAPS, configmap("ignored", namespace, b="2"))
    manager = await Manager.create(
        control_plane.kubeconfig,
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
    )
    example["setup"](manager)
    async with running(manager):
        await eventually(lambda: mirrored(client, namespace, "early", {"a": "1"}))
        await client.create(CONFIGMAPS, configmap("late", namespace, {"mirror": "true"}, c="3"))
        await eventually(lambda: mirrored(client, namespace, "late", {"c": "3"}))
        await client.merge_patch(CONFIGMAPS, "late-mirror", {"data": {"c": "tampered"}}, namespace)
        await eventually(lambda: mirrored(client, namespace, "late", {"c": "3"}))
        mirror = await client.get(CONFIGMAPS, "late-mirror", namespace)
        assert mirror["metadata"]["ownerReferences"][0]["name"] == "late"
        # only the labelled originals and the mirrors are cached, never "ignored"
        cached = {
            o["metadata"]["name"]
            for selector in ("mirror=true", "mirror-of")
            for o in manager.cache.list(CONFIGMAPS, namespace, label_selector=selector)
        }
        assert cached == {"early", "late", "early-mirror", "late-mirror"}
        # a ConfigMap that lost its label is no longer mirrored, although a mirror still
        # (owned, so cached) refers to it
        unlabelled = {"metadata": {"labels": {"mirror": None}}, "data": {"c": "4"}}
        await client.merge_patch(CONFIGMAPS, "late", unlabelled, namespace)
        await client.merge_patch(CONFIGMAPS, "late-mirror", {"data": {"c": "again"}}, namespace)
        await client.merge_patch(CONFIGMAPS, "early", {"data": {"a": "2"}}, namespace)
        await eventually(lambda: mirrored(client, namespace, "early", {"a": "2"}))
        assert await mirrored(client, namespace, "late", {"c": "again"})
    assert await get_or_none(client, CONFIGMAPS, "ignored-mirror", namespace) is None
