"""The node status exporter: serves `NodeStatusCollector`'s gauges on ``/metrics`` and runs
the probes behind them every interval, until stopped.

Each probe runs in a loop of its own, so a slow one (an nvidia-smi that hangs until its
timeout, an apiserver that does not answer) delays no other. The driver check and the PCI
count touch the disk or spawn a process, so they run in a worker thread, never on the event
loop that answers scrapes. Each probe's outcome is logged when it changes, not at every run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpuctrl.runtime import ApiError, Client, Resource
from gpuctrl.validator._metrics import (
    NodeProbes,
    NodeStatusCollector,
    count_gpu_resources,
    count_nvidia_pci_devices,
)
from gpuctrl.validator._smi import driver_command, run_smi

__all__ = ["DRIVER_CHECK_TIMEOUT", "CannotServe", "ExporterSettings", "serve"]

log = logging.getLogger("gpuctrl.validator.metrics")

_NODES = Resource("v1", "Node", "nodes")
# The longest a driver check may run (--interval if shorter): nvidia-smi runs in a worker
# thread that a stop cannot interrupt, so this also bounds how long a stop may wait for it.
DRIVER_CHECK_TIMEOUT = 20.0
# What a probe run came to: a log level and a message, logged when it differs from the last.
_Outcome = tuple[int, str]


class CannotServe(Exception):
    """The port cannot be bound; the message says which and why, in one line."""


@dataclass(frozen=True)
class ExporterSettings:
    """What ``gpuctrl validate metrics`` was given: the port (every interface), the node, the
    folders, and the seconds between two runs of each probe."""

    port: int
    node: str
    output_dir: Path
    host_root: Path
    driver_root: Path
    interval: float


async def serve(settings: ExporterSettings, api: ApiClient, stop: asyncio.Event) -> None:
    """Serve ``/metrics`` on ``settings.port`` and run the probes until ``stop`` is set.
    ``api`` reads the Node (``get nodes``); the caller owns it. Raises `CannotServe` when the
    port cannot be bound, before any probe runs."""
    probes = NodeProbes(started=time.time())
    registry = CollectorRegistry()  # the exporter's own: never the process-wide one
    registry.register(NodeStatusCollector(settings.node, settings.output_dir, probes))
    runner = await _start_server(settings.port, registry)
    log.info("serving node status metrics of %s on :%d/metrics", settings.node, settings.port)
    client = Client(api)
    loops = [
        asyncio.create_task(_every(settings.interval, probe))
        for probe in (
            lambda: _probe_driver(settings, probes),
            lambda: _probe_devices(client, settings.node, probes),
            lambda: _probe_pci(settings.host_root, probes),
        )
    ]
    try:
        await stop.wait()
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await runner.cleanup()


async def _start_server(port: int, registry: CollectorRegistry) -> web.AppRunner:
    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, None, port).start()
    except OSError as error:
        await runner.cleanup()
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise CannotServe(f"cannot listen on :{port}: {reason}") from None
    return runner


async def _every(interval: float, probe: Callable[[], Awaitable[_Outcome]]) -> None:
    """Run ``probe`` every ``interval`` seconds, logging its outcome when it changes. A probe
    that raises is logged with its traceback and run again: one bug must not freeze a gauge
    for the pod's life (the probes catch every failure they expect)."""
    last: _Outcome | None = None
    while True:
        error: Exception | None = None
        try:
            outcome = await probe()
        except Exception as raised:
            error = raised
            outcome = (logging.ERROR, f"a probe failed unexpectedly: {raised!r}")
        if outcome != last:
            log.log(*outcome, exc_info=error)
            last = outcome
        await asyncio.sleep(interval)


async def _probe_driver(settings: ExporterSettings, probes: NodeProbes) -> _Outcome:
    result = await asyncio.to_thread(
        run_smi,
        lambda: driver_command(settings.host_root, settings.driver_root),
        wait=False,
        timeout=min(settings.interval, DRIVER_CHECK_TIMEOUT),
        interval=settings.interval,
    )
    probes.record_driver(result.passed, time.time())
    if result.passed:  # not its output: nvidia-smi's table changes at every run
        return logging.INFO, f"driver check passed: ran {' '.join(result.argv)}"
    return logging.WARNING, f"driver check failed: {result.describe()}"


async def _probe_devices(client: Client, node: str, probes: NodeProbes) -> _Outcome:
    try:
        count = count_gpu_resources(await client.get(_NODES, node))
    except (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
        probes.record_devices(-1, time.time())
        return logging.ERROR, f"cannot read Node {node}: {error}"
    probes.record_devices(count, time.time())
    return logging.INFO, f"Node {node} has {count} GPUs in its capacity"


async def _probe_pci(host_root: Path, probes: NodeProbes) -> _Outcome:
    probes.pci_devices = await asyncio.to_thread(count_nvidia_pci_devices, host_root)
    if probes.pci_devices < 0:
        return logging.ERROR, f"cannot list the PCI devices under {host_root}"
    return logging.INFO, f"{probes.pci_devices} NVIDIA PCI devices under {host_root}"
