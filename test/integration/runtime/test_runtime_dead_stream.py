"""A watch whose connection goes silent (a proxy that stops forwarding, keeping the sockets
open) is noticed by the reflector's read timeout; the cache catches up instead of staying
stale for the watch's whole 5-10 minutes."""

import asyncio
from pathlib import Path

from runtime_helpers import CONFIGMAPS, configmap
from tcp_proxy import FreezableProxy, through, upstream_of

from gpuctrl.runtime import Client, Manager
from gpuctrl.testing import ControlPlane, eventually


async def test_a_silent_watch_is_dropped_and_the_cache_catches_up(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    await client.create(CONFIGMAPS, configmap("watched", namespace, value="1"))
    async with FreezableProxy(*upstream_of(control_plane.kubeconfig)) as proxy:
        kubeconfig = through(control_plane.kubeconfig, proxy.port, tmp_path / "proxied")
        manager = await Manager.create(
            kubeconfig,
            metrics_bind_address=None,
            health_probe_bind_address=None,
            watch_read_timeout=3.0,
            request_timeout=5.0,
        )
        manager.cache.informer(CONFIGMAPS, namespace=namespace)
        stop = asyncio.Event()
        task = asyncio.create_task(manager.start(stop))
        try:
            await eventually(manager.ready, within=30)
            proxy.freeze()  # the open watch now hears nothing, and says so to nobody
            await client.merge_patch(CONFIGMAPS, "watched", {"data": {"value": "2"}}, namespace)

            def caught_up() -> bool:
                cached = manager.cache.get(CONFIGMAPS, "watched", namespace)
                return cached is not None and cached["data"] == {"value": "2"}

            await eventually(caught_up, within=30)
            assert proxy.connections >= 2  # it reconnected
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
