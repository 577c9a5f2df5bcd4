"""Informers and controllers across an API server restart (on a control plane of their own).

The restarted server's watch cache starts at etcd's current revision, so the informer's watch,
resumed from an older resourceVersion, gets 410 Gone ("too old resource version"): it must
relist, deliver what changed meanwhile exactly once (deletions included), and controllers must
converge afterwards.
"""

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest_asyncio
from runtime_helpers import CONFIGMAPS, configmap, get_or_none, running

from gpuctrl.runtime import METRICS_REGISTRY, Client, Manager, Request, new_api_client
from gpuctrl.testing import ControlPlane, eventually

NS = "faults"


class Recorder:
    """Every event an informer delivered, as (type, name, resourceVersion)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def _record(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._record("add", obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._record("update", new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        self._record("delete", obj)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def own_plane() -> AsyncIterator[ControlPlane]:
    """A control plane only this module restarts."""
    async with ControlPlane() as plane:
        yield plane


def versions(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Each object's name -> resourceVersion."""
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects}


def lists_total() -> float:
    labels = {"resource": "configmaps.v1"}
    return METRICS_REGISTRY.get_sample_value("gpuctrl_informer_lists_total", labels) or 0.0


async def test_apiserver_restart_relists_without_loss_or_duplicates(
    own_plane: ControlPlane,
) -> None:
    async with await new_api_client(own_plane.kubeconfig) as api:
        admin = Client(api)
        for ns in (NS, "elsewhere"):
            await admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        for name in ("keep", "change", "remove"):
            await admin.create(CONFIGMAPS, configmap(name, NS, value=name))

        reconciled: list[str] = []

        async def mirror(request: Request) -> None:
            reconciled.append(request.name)
            source = manager.cache.get(CONFIGMAPS, request.name, request.namespace)
            if source is not None and not request.name.endswith("-copy"):
                copy = configmap(f"{request.name}-copy", NS, **source["data"])
                await manager.client.apply(CONFIGMAPS, copy, field_manager="mirror", force=True)

        manager = await Manager.create(
            own_plane.kubeconfig, metrics_bind_address=None, health_probe_bind_address=None
        )
        manager.add_controller("mirror", mirror, for_=CONFIGMAPS, namespace=NS)
        recorder = Recorder()
        manager.cache.informer(CONFIGMAPS, namespace=NS).add_handler(recorder)
        async with running(manager):
            await eventually(lambda: {"keep", "change", "remove"} <= set(reconciled))
            await eventually(lambda: manager.cache.get(CONFIGMAPS, "remove-copy", NS) is not None)
            lists_before = lists_total()
            # a write the informer does not watch moves etcd past the informer's resourceVersion
            await admin.create(CONFIGMAPS, configmap("unrelated", "elsewhere"))

            await own_plane.restart_apiserver()
            changed = await admin.merge_patch(CONFIGMAPS, "change", {"data": {"value": "v2"}}, NS)
            await admin.delete(CONFIGMAPS, "remove", NS)
            await admin.create(CONFIGMAPS, configmap("new", NS, value="new"))

            async def converged() -> bool:
                copy = await get_or_none(admin, CONFIGMAPS, "change-copy", NS)
                new_copy = await get_or_none(admin, CONFIGMAPS, "new-copy", NS)
                gone = manager.cache.get(CONFIGMAPS, "remove", NS) is None
                return gone and new_copy is not None and copy["data"] == {"value": "v2"}

            await eventually(converged, within=60)
            assert lists_total() > lists_before, "the 410 after the restart did not relist"

            async def cache_matches_server() -> None:
                """Both read afresh on every poll: name -> resourceVersion."""
                server = versions(await admin.list(CONFIGMAPS, NS))
                assert versions(manager.cache.list(CONFIGMAPS, NS)) == server

            await eventually(cache_matches_server)

        changes = [e for e in recorder.events if e[1] in ("change", "remove", "new")]
        assert len(changes) == len(set(changes)), f"an event was delivered twice: {changes}"
        deletes = [e for e in recorder.events if e[0] == "delete"]
        assert [e[1] for e in deletes] == ["remove"]
        change_rv = changed["metadata"]["resourceVersion"]
        assert [e for e in changes if e[1] == "change"][-1] == ("update", "change", change_rv)
        assert [e[0] for e in changes if e[1] == "new"] == ["add"]
