"""The manager's HTTP endpoints: ``/healthz`` and ``/readyz`` on the probe address, Prometheus
``/metrics`` on the metrics address (the same server when both addresses are equal).

A probe runs its named checks (a callable returning a bool or an awaitable bool, bounded by
``CHECK_TIMEOUT``; an exception is a failure) and answers 200 ``ok`` when all pass, else an error
with one ``[+]name ok`` / ``[-]name failed`` line per check, as controller-runtime's healthz
(``/healthz`` fails with 500; ``/readyz`` with 503, Service Unavailable).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ._errors import CannotListen
from ._metrics import METRICS_REGISTRY

__all__ = [
    "CHECK_TIMEOUT",
    "Check",
    "HttpServer",
    "cannot_listen",
    "listen",
    "parse_bind_address",
]

log = logging.getLogger("gpuctrl.runtime.http")

Check = Callable[[], bool | Awaitable[bool]]
"""A health or readiness check: True when healthy."""

CHECK_TIMEOUT = 5.0
"""Seconds one check may take before it counts as failed."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def parse_bind_address(address: str) -> tuple[str, int]:
    """``":8080"`` (every interface), ``"127.0.0.1:0"`` or ``"[::1]:8081"`` as (host, port);
    raises ``ValueError`` naming the address otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bind address {address!r} is not HOST:PORT (e.g. ':8080')")
    return host.strip("[]") or "0.0.0.0", int(port)


async def listen(site: web.TCPSite, host: str, port: int) -> None:
    """Start ``site`` on ``host:port``; a bind failure raises `CannotListen` naming both."""
    try:
        await site.start()
    except OSError as error:
        raise cannot_listen(host, port, error) from None


def cannot_listen(host: str, port: int, error: OSError) -> CannotListen:
    """The one-line `CannotListen` for a failure to bind ``host:port``."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = os.strerror(error.errno) if error.errno else str(error)
    return CannotListen(f"cannot listen on {shown}: {reason}")


def probe(checks: Mapping[str, Check], failed_status: int) -> Handler:
    """An endpoint running ``checks`` (read at each request, so checks added later count),
    answering ``failed_status`` when one fails."""

    async def handle(request: web.Request) -> web.Response:
        results = {name: await _passes(name, check) for name, check in list(checks.items())}
        if all(results.values()):
            return web.Response(text="ok")
        lines = [
            f"[{'+' if ok else '-'}]{name} {'ok' if ok else 'failed'}"
            for name, ok in results.items()
        ]
        return web.Response(
            status=failed_status, text="\n".join([*lines, f"{request.path[1:]} failed"])
        )

    return handle


async def metrics(request: web.Request) -> web.Response:
    """Every metric of ``METRICS_REGISTRY`` in Prometheus' text format."""
    body = generate_latest(METRICS_REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _passes(name: str, check: Check) -> bool:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            outcome = check()
            if inspect.isawaitable(outcome):
                outcome = await outcome
            return bool(outcome)
    except Exception as error:
        log.warning("check %s failed: %r", name, error)
        return False


class HttpServer:
    """Serves ``routes`` (path -> GET handler) on ``host:port`` (port 0 picks a free one;
    `port` tells which once started)."""

    def __init__(self, host: str, port: int, routes: Mapping[str, Handler]) -> None:
        self._host = host
        self._requested_port = port
        self._routes = dict(routes)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        """Bind and serve (returns once listening)."""
        app = web.Application()
        for path, handler in self._routes.items():
            app.router.add_get(path, handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._requested_port)
        await listen(site, self._host, self._requested_port)
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
