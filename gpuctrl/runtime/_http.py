"""The manager's HTTP endpoints: ``/healthz``, ``/readyz`` and Prometheus ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ._metrics import METRICS_REGISTRY

__all__ = ["ProbeServer"]


class ProbeServer:
    """Serves health, readiness (``ready()``: 200 or 503) and metrics on ``host:port``
    (port 0 picks a free one; `port` tells which once started)."""

    def __init__(self, host: str, port: int, ready: Callable[[], bool]) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        """Bind and serve (returns once listening)."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(METRICS_REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
