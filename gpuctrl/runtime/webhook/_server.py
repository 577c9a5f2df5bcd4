"""The admission webhook server: HTTPS on aiohttp, run by a manager on every replica.

Each registered path takes ``POST`` AdmissionReviews (``admission.k8s.io/v1``). The server is a
thin shell around the handlers: it reads at most ``max_body_bytes``, parses the review
(`parse_review`), awaits the handler and writes its answer (`review_response`). What the
caller gets:

- a body that is too big, not JSON or not an AdmissionReview v1 request: HTTP 400 with a
  message naming what is wrong (never a 5xx);
- a body that has not fully arrived ``body_timeout`` seconds after the headers: HTTP 408;
- a handler that raises: logged with its traceback, counted in
  ``controller_runtime_webhook_panics_total``, answered ``allowed: false`` with Status code
  500, so an internal error never admits or denies silently;
- every request is counted in ``controller_runtime_webhook_requests_total{webhook,code}``
  (``code`` the HTTP status), timed in ``controller_runtime_webhook_latency_seconds`` and
  gauged in ``controller_runtime_webhook_requests_in_flight`` (``webhook`` is the path).

TLS comes from a `CertWatcher`: `ready` is true once the server listens with a certificate
loaded, and certificate changes reach new connections without a restart.

Limits, so that slow or idle clients cannot hold the server (all in real seconds):

- ``handshake_timeout`` (10 s): a connection that has not completed its TLS handshake by then
  is closed;
- ``idle_timeout`` (30 s): a connection that has not delivered a complete request header
  within this many seconds of its handshake or of its last response is closed. One timeout
  serves for both a stalled header and an idle keep-alive connection (aiohttp's
  ``keepalive_timeout``): bytes trickling in do not extend it, and 30 s lets the apiserver
  reuse its connections across bursts of admissions;
- ``body_timeout`` (10 s, the apiserver's default webhook timeout): the most a body may take
  after its headers (else 408), and the most spent discarding the rest of a body left unread
  after an answer;
- ``max_connections`` (256): connections beyond this many are closed as soon as they are
  accepted, before any TLS work. The count includes connections still in the handshake, since
  each costs as much memory as an established one (about 0.3 MB, most of it the 256 KiB TLS
  read buffer asyncio allocates per connection), so the connections' memory stays bounded
  (about 80 MB at the default) however fast clients connect.

Shutdown, once ``stop`` is set: `ready` turns false at once, the server keeps accepting and
serving for ``shutdown_delay`` seconds (5 s: longer than the endpoint change takes to reach
the apiserver, so no admission is refused in a rollout) and answers with ``Connection:
close`` meanwhile, so the apiserver's next calls open connections to another replica; then it
stops accepting, lets the requests in flight finish for at most ``drain_timeout`` seconds
(10 s) and closes every connection. Under a `Manager` this happens once the leader runnables
have drained, within its ``graceful_shutdown_timeout`` (25 s): keep ``shutdown_delay`` plus
``drain_timeout`` below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from .._clock import Clock
from .._http import cannot_listen
from ._certs import CertWatcher
from ._metrics import IN_FLIGHT, LATENCY, PANICS, REQUESTS
from ._review import AdmissionRequest, AdmissionResponse, BadReview, parse_review, review_response

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_SHUTDOWN_DELAY",
    "Handler",
    "WebhookServer",
]

log = logging.getLogger("gpuctrl.runtime.webhook")

DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
"""The largest request body read (3 MiB, the apiserver's own limit on a request)."""

DEFAULT_HANDSHAKE_TIMEOUT = 10.0
"""Seconds a connection may take to complete its TLS handshake."""

DEFAULT_IDLE_TIMEOUT = 30.0
"""Seconds a connection may go without a complete request header (after the handshake or the
last response)."""

DEFAULT_BODY_TIMEOUT = 10.0
"""Seconds a request body may take to arrive after its headers."""

DEFAULT_MAX_CONNECTIONS = 256
"""Connections held at once, in the TLS handshake or established."""

DEFAULT_SHUTDOWN_DELAY = 5.0
"""Seconds the server keeps serving, no longer ready, once stopped."""

DEFAULT_DRAIN_TIMEOUT = 10.0
"""Seconds the requests in flight get to finish once the server stops accepting."""

_ACCEPT_RETRY_DELAY = 1.0  # after accept() fails for want of descriptors or memory (as asyncio)

Handler = Callable[[AdmissionRequest], Awaitable[AdmissionResponse]]
"""``async def handle(request) -> AdmissionResponse`` (`allowed`, `denied` or `patched`)."""


class WebhookServer:
    """Serves admission handlers over HTTPS on ``host:port`` (0 picks a free port, see `port`)
    with the certificate of ``cert_dir`` (see `CertWatcher`), within the limits and with the
    shutdown the module describes; a `Runnable` that runs on every replica. Register handlers
    before `start`."""

    needs_leader = False

    def __init__(
        self,
        cert_dir: Path,
        *,
        host: str = "0.0.0.0",
        port: int = 9443,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        shutdown_delay: float = DEFAULT_SHUTDOWN_DELAY,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        cert_poll_interval: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.certs = CertWatcher(cert_dir, poll_interval=cert_poll_interval, clock=clock)
        self._host = host
        self._port = port
        self._max_body = max_body_bytes
        self._handshake_timeout = handshake_timeout
        self._idle_timeout = idle_timeout
        self._body_timeout = body_timeout
        self._max_connections = max_connections
        self._shutdown_delay = shutdown_delay
        self._drain_timeout = drain_timeout
        self._handlers: dict[str, Handler] = {}
        self._listening = asyncio.Event()
        self._stop = asyncio.Event()  # the event `start` runs until
        self._server: web.Server | None = None  # aiohttp's, holding the established connections
        self._handshakes: set[asyncio.Task[None]] = set()  # one per connection in its handshake
        self._refusing = False  # whether the last connection accepted was over the cap
        self.port: int | None = None

    def register(self, path: str, handler: Handler) -> None:
        """Serve ``handler`` at ``path`` (e.g. ``/mutate-v1-pod``)."""
        if path in self._handlers:
            raise ValueError(f"a handler is already registered at {path}")
        self._handlers[path] = handler

    def ready(self) -> bool:
        """Whether the server listens, has a certificate loaded and is not shutting down."""
        return self._listening.is_set() and self.certs.loaded and not self._stop.is_set()

    @property
    def open_connections(self) -> int:
        """How many connections the server holds now, in the TLS handshake or established."""
        established = len(self._server.connections) if self._server is not None else 0
        return len(self._handshakes) + established

    async def wait_listening(self) -> None:
        """Return once the server listens (`port` is then set)."""
        await self._listening.wait()

    async def start(self, stop: asyncio.Event) -> None:
        """Listen and serve until ``stop`` is set, watching the certificate files meanwhile;
        then shut down as the module describes. Raises `CannotListen` when the address cannot
        be bound."""
        self._stop = stop
        self.certs.reload()
        app = web.Application(client_max_size=self._max_body)
        for path, handler in self._handlers.items():
            app.router.add_post(path, self._endpoint(path, handler))
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=self._idle_timeout,
            lingering_time=self._body_timeout,
            shutdown_timeout=self._drain_timeout,
        )
        await runner.setup()
        self._server = runner.server
        try:
            async with self._accepting():
                self._listening.set()
                log.info("webhook server listening on %s:%s", self._host, self.port)
                await self.certs.watch(stop)
                log.info("webhook server stopping: serving %s s more", self._shutdown_delay)
                await asyncio.sleep(self._shutdown_delay)
        finally:
            self._listening.clear()
            await runner.cleanup()  # closes idle connections, drains and closes the others
            self._server = None

    @contextlib.asynccontextmanager
    async def _accepting(self) -> AsyncIterator[None]:
        """Accept connections on ``host:port`` while the block runs; then drop those still in
        the handshake and close the listening socket."""
        listener = _bind(self._host, self._port)
        self.port = int(listener.getsockname()[1])
        accepting = asyncio.create_task(self._accept(listener, self.certs.server_context()))
        try:
            yield
        finally:
            for task in [accepting, *self._handshakes]:
                task.cancel()
            await asyncio.gather(accepting, *self._handshakes, return_exceptions=True)
            listener.close()

    async def _accept(self, listener: socket.socket, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(listener)
            except ConnectionAbortedError:  # the client reset it before it was accepted
                continue
            except OSError as error:
                log.error("webhook server cannot accept connections: %s", error)
                await asyncio.sleep(_ACCEPT_RETRY_DELAY)
                continue
            if self.open_connections >= self._max_connections:
                connection.close()
                if not self._refusing:
                    log.warning(
                        "webhook server holds %s connections, closing new ones",
                        self._max_connections,
                    )
                self._refusing = True
                continue
            self._refusing = False
            task = asyncio.create_task(self._handshake(connection, context))
            self._handshakes.add(task)
            task.add_done_callback(functools.partial(self._handshake_ended, connection))

    async def _handshake(self, connection: socket.socket, context: ssl.SSLContext) -> None:
        """Complete the TLS handshake and hand the connection to aiohttp."""
        assert self._server is not None
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                self._server,
                connection,
                ssl=context,
                ssl_handshake_timeout=self._handshake_timeout,
            )
        except OSError as error:  # timed out, not TLS, or the client left: the socket is closed
            log.debug("webhook TLS handshake failed: %r", error)

    def _handshake_ended(self, connection: socket.socket, task: asyncio.Task[None]) -> None:
        self._handshakes.discard(task)
        if task.cancelled():  # perhaps before it ran: no transport owns the socket then
            connection.close()

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
            if self._stop.is_set():  # shutting down: send the client's next call elsewhere
                response.force_close()
            return response

        return endpoint

    async def _serve(self, path: str, handler: Handler, request: web.Request) -> web.Response:
        try:
            async with asyncio.timeout(self._body_timeout):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _bad_request(f"the body is over {self._max_body} bytes")
        except TimeoutError:
            message = f"the body did not arrive within {self._body_timeout} s\n"
            return web.Response(status=408, text=message)
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


def _bind(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port``; `CannotListen` naming both if not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host, port), family=family)
    except OSError as error:
        raise cannot_listen(host, port, error) from None
    listener.setblocking(False)
    return listener


def _bad_request(message: str) -> web.Response:
    return web.Response(status=400, text=message + "\n")
