"""One leader at a time across a clean shutdown: the old leader keeps renewing its Lease while
its in-flight reconciles drain, and releases it only then, so the standby cannot take over
while the old leader still writes (the rolling-update case of issue 9)."""

import asyncio
from contextlib import aclosing
from typing import Any

import aiohttp
from runtime_helpers import CONFIGMAPS, configmap

from gpuctrl.runtime import LEASES, Client, LeaderElection, Manager, Request
from gpuctrl.testing import ControlPlane, eventually

LEASE = "handover"


async def watch_holders(client: Client, namespace: str, seen: list[tuple[int, str]]) -> None:
    """Append (resourceVersion, holder) for every change of the Lease."""
    query = {"fieldSelector": f"metadata.name={LEASE}", "resourceVersion": "0"}
    limits = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aclosing(client.watch(LEASES.path(namespace), query, limits)) as events:
        async for event in events:
            lease = event["object"]
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            seen.append((int(lease["metadata"]["resourceVersion"]), holder))


async def test_the_old_leader_never_writes_after_the_new_one_acquired(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    writes: dict[str, list[int]] = {"a": [], "b": []}

    def manager_for(identity: str) -> Any:
        async def build() -> Manager:
            election = LeaderElection(
                LEASE,
                namespace,
                identity=identity,
                lease_duration=3,
                renew_deadline=2,
                retry_period=0.5,
            )
            manager = await Manager.create(
                control_plane.kubeconfig,
                metrics_bind_address=None,
                health_probe_bind_address=None,
                leader_election=election,
                graceful_shutdown_timeout=20,
            )

            async def reconcile(request: Request) -> None:
                # a long reconcile that keeps writing: 6 s, twice the lease duration
                for i in range(24):
                    name = f"write-{identity}-{len(writes[identity])}-{i}"
                    written = await manager.client.create(
                        CONFIGMAPS, configmap(name, namespace, {"writer": identity})
                    )
                    writes[identity].append(int(written["metadata"]["resourceVersion"]))
                    await asyncio.sleep(0.25)

            manager.add_controller(
                "handover", reconcile, for_=CONFIGMAPS, namespace=namespace, label_selector="work"
            )
            return manager

        return build

    holders: list[tuple[int, str]] = []
    watching = asyncio.create_task(watch_holders(client, namespace, holders))
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    a = await manager_for("a")()
    running_a = asyncio.create_task(a.start(stop_a))
    await eventually(lambda: a.is_leader, within=30)
    await client.create(CONFIGMAPS, configmap("job", namespace, {"work": "yes"}))
    await eventually(lambda: len(writes["a"]) >= 2, within=30)
    b = await manager_for("b")()
    running_b = asyncio.create_task(b.start(stop_b))
    try:
        await eventually(lambda: b.cache.has_synced, within=30)
        stop_a.set()  # a rolling update: SIGTERM to the old pod, mid-reconcile
        await asyncio.wait_for(running_a, 25)
        await eventually(lambda: b.is_leader, within=30)
        await eventually(lambda: any(h == "b" for _, h in holders), within=10)
    finally:
        stop_b.set()
        await asyncio.wait_for(running_b, 30)
        watching.cancel()
    acquired_by_b = min(rv for rv, h in holders if h == "b")
    assert len(writes["a"]) == 24  # the drain let the reconcile finish ...
    assert max(writes["a"]) < acquired_by_b  # ... before b could take the Lease
