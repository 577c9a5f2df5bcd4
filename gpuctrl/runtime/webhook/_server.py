"""The admission webhook server: HTTPS on aiohttp, run by a manager on every replica.

Each registered path takes ``POST`` AdmissionReviews (``admission.k8s.io/v1``). The server is a
thin shell around the handlers: it reads at most ``max_body_bytes``, parses the review
(`parse_review`), awaits the handler and writes its answer (`review_response`). What the
caller gets:

- a body that is too big, not JSON or not an AdmissionReview v1 request: HTTP 400 with a
  message naming what is wrong (never a 5xx);
- a handler that raises: logged with its traceback, counted in
  ``controller_runtime_webhook_panics_total``, answered ``allowed: false`` with Status code
  500, so an internal error never admits or denies silently;
- every request is counted in ``controller_runtime_webhook_requests_total{webhook,code}``
  (``code`` the HTTP status), timed in ``controller_runtime_webhook_latency_seconds`` and
  gauged in ``controller_runtime_webhook_requests_in_flight`` (``webhook`` is the path).

TLS comes from a `CertWatcher`: `ready` is true once the server listens with a certificate
loaded, and certificate changes reach new connections without a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from .._clock import Clock
from .._http import listen
from ._certs import CertWatcher
from ._metrics import IN_FLIGHT, LATENCY, PANICS, REQUESTS
from ._review import AdmissionRequest, AdmissionResponse, BadReview, parse_review, review_response

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Handler", "WebhookServer"]

log = logging.getLogger("gpuctrl.runtime.webhook")

DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
"""The largest request body read (3 MiB, the apiserver's own limit on a request)."""

Handler = Callable[[AdmissionRequest], Awaitable[AdmissionResponse]]
"""``async def handle(request) -> AdmissionResponse`` (`allowed`, `denied` or `patched`)."""


class WebhookServer:
    """Serves admission handlers over HTTPS on ``host:port`` (0 picks a free port, see `port`)
    with the certificate of ``cert_dir`` (see `CertWatcher`); a `Runnable` that runs on every
    replica. Register handlers before `start`."""

    needs_leader = False

    def __init__(
        self,
        cert_dir: Path,
        *,
        host: str = "0.0.0.0",
        port: int = 9443,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        cert_poll_interval: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.certs = CertWatcher(cert_dir, poll_interval=cert_poll_interval, clock=clock)
        self._host = host
        self._port = port
        self._max_body = max_body_bytes
        self._handlers: dict[str, Handler] = {}
        self._listening = asyncio.Event()
        self.port: int | None = None

    def register(self, path: str, handler: Handler) -> None:
        """Serve ``handler`` at ``path`` (e.g. ``/mutate-v1-pod``)."""
        if path in self._handlers:
            raise ValueError(f"a handler is already registered at {path}")
        self._handlers[path] = handler

    def ready(self) -> bool:
        """Whether the server listens and has a certificate loaded."""
        return self._listening.is_set() and self.certs.loaded

    async def wait_listening(self) -> None:
        """Return once the server listens (`port` is then set)."""
        await self._listening.wait()

    async def start(self, stop: asyncio.Event) -> None:
        """Listen and serve until ``stop`` is set, watching the certificate files meanwhile."""
        self.certs.reload()
        app = web.Application(client_max_size=self._max_body)
        for path, handler in self._handlers.items():
            app.router.add_post(path, self._endpoint(path, handler))
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(
                runner, self._host, self._port, ssl_context=self.certs.server_context()
            )
            await listen(site, self._host, self._port)
            self.port = int(runner.addresses[0][1])
            self._listening.set()
            log.info("webhook server listening on %s:%s", self._host, self.port)
            await self.certs.watch(stop)
        finally:
            self._listening.clear()
            await runner.cleanup()

    def _endpoint(
        self, path: str, handler: Handler
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        in_flight = IN_FLIGHT.labels(path)
        latency = LATENCY.labels(path)

        async def endpoint(request: web.Request) -> web.Response:
            started = time.perf_counter()
            in_flight.inc()
            try:
                response = await self._serve(path, handler, request)
            finally:
                in_flight.dec()
            latency.observe(time.perf_counter() - started)
            REQUESTS.labels(path, str(response.status)).inc()
            return response

        return endpoint

    async def _serve(self, path: str, handler: Handler, request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _bad_request(f"the body is over {self._max_body} bytes")
        try:
            review = parse_review(body)
        except BadReview as error:
            return _bad_request(str(error))
        try:
            answer = await handler(review)
        except Exception as error:
            log.exception("admission handler %s failed on request %s", path, review.uid)
            PANICS.labels(path).inc()
            answer = AdmissionResponse(
                allowed=False, code=500, message=f"internal error in webhook {path}: {error!r}"
            )
        return web.Response(
            body=json.dumps(review_response(review.uid, answer), separators=(",", ":")),
            content_type="application/json",
        )


def _bad_request(message: str) -> web.Response:
    return web.Response(status=400, text=message + "\n")
