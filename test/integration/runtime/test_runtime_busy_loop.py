"""5,000 keys that never stop reconciling (each a 1 ms busy, never-awaiting pass) must not
starve the rest of the manager: probes still answer and the Lease is still renewed."""

import asyncio
import time

import aiohttp

from gpuctrl.runtime import LEASES, Client, LeaderElection, Manager, Request, Resource
from gpuctrl.testing import ControlPlane, eventually

CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")


async def test_probes_and_lease_renewal_keep_running_under_5000_busy_keys(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    manager = await Manager.create(
        control_plane.kubeconfig,
        metrics_bind_address=None,
        health_probe_bind_address="127.0.0.1:0",
        leader_election=LeaderElection("busy", namespace),
    )
    reconciles = 0

    async def busy(request: Request) -> None:
        nonlocal reconciles
        reconciles += 1
        time.sleep(0.001)  # noqa: ASYNC251 - CPU work, no await: a converged, cache-only pass
        controller.queue.add(request)  # and it is wanted again at once

    controller = manager.add_controller("busy", busy, for_=CONFIGMAPS, namespace=namespace)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.start(stop))
    try:
        await eventually(lambda: manager.is_leader, within=30)
        for i in range(5000):
            controller.queue.add(Request(namespace, f"key-{i}"))
        renewals: set[str] = set()
        answered = 0
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{manager.health_probe_port}/healthz"
            for _ in range(20):  # about 6 s of a loop kept busy by 5,000 keys
                async with asyncio.timeout(2), http.get(url) as response:
                    assert response.status == 200
                    answered += 1
                lease = await client.get(LEASES, "busy", namespace)
                renewals.add(lease["spec"]["renewTime"])
                await asyncio.sleep(0.3)
        assert answered == 20
        assert len(renewals) >= 2  # renewed every 2 s meanwhile
        assert reconciles > 2000  # the keys really kept the worker busy all along
    finally:
        stop.set()
        await asyncio.wait_for(task, 40)
