"""The manager: one API client, the shared cache, controllers and other runnables.

Start order (`Manager.start`):

1. the HTTP servers: probes (``/healthz``, ``/readyz``) on ``health_probe_bind_address``,
   ``/metrics`` on ``metrics_bind_address``, so probes answer from the start;
2. runnables that need neither the leader nor the cache (``needs_cache = False``), so they
   run while the caches fill; a `WebhookServer` is not one of them: its handlers usually read
   the cache, so it listens only once the caches have synced;
3. the caches, waiting until every informer has synced (``/readyz`` turns 200 then);
4. the other runnables that do not need the leader: these run on every replica;
5. with leader election: campaign for the Lease, then the runnables that need the leader
   (controllers); without: those at once.

Shutdown (``stop`` set, SIGTERM/SIGINT under `Manager.run`, or a runnable failed) goes the
other way, inside one budget of ``graceful_shutdown_timeout`` seconds (25 s: it fits in a
pod's default 30 s termination grace): leader runnables stop taking work and drain their
in-flight reconciles *while the Lease is still renewed* (no standby can take over while this
replica still writes), then the Lease is released, then the other runnables, the caches and the
HTTP servers stop with what is left of the budget, and the API client is closed. Losing the
Lease, at any time, cancels the leader runnables at once, shuts down the same way and raises
`LeaderElectionLost`.

The shutdown budget is one deadline on the manager's clock rather than anyio cancel scopes:
``fail_after`` and friends run on the event loop's own time, which a `FakeClock` cannot drive.

Time: one `Clock` (``clock``, `SystemClock` unless given) flows from the manager to the client
(pacing), the cache's informers (resyncs, reflector backoff), the controllers (queue delays,
rate limits, drain), the leader election (retry, renew deadline) and the shutdown budget.
Deadlines on real I/O (each request's ``request_timeout``, ``cache_sync_timeout``) stay in real
seconds: a fake clock that jumps ahead while the loop waits on a socket must not fail a request
that is merely slow.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol, Unpack

from kubernetes_asyncio import client as k8s_client

from ._builder import ControllerOptions, build_controller
from ._cache import Cache
from ._client import DEFAULT_REQUEST_TIMEOUT, Client
from ._clock import Clock, SystemClock
from ._controller import Controller, Reconciler
from ._errors import LeaderElectionLost
from ._events import EventRecorder, EventSink
from ._http import Check, Handler, HttpServer, metrics, parse_bind_address, probe
from ._informer import Transform
from ._kubeconfig import new_api_client
from ._leader import LeaderElection, LeaderElector
from ._reflector import DEFAULT_READ_TIMEOUT
from ._resources import Resource

__all__ = ["Manager", "Runnable"]

log = logging.getLogger("gpuctrl.runtime.manager")


class Runnable(Protocol):
    """Something a manager runs: ``start(stop)`` returns once ``stop`` is set (and cleaned up);
    ``needs_leader`` says whether it may only run while this process leads (False: it runs on
    every replica). A runnable may also set ``needs_cache = False`` to start before the caches
    sync."""

    needs_leader: bool

    async def start(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set."""


class Manager:
    """Runs a cache, controllers and runnables on one API client, which it owns and closes.

    ``metrics_bind_address`` and ``health_probe_bind_address`` are ``HOST:PORT`` (``":8080"``:
    every interface); None serves nothing there, port 0 picks a free one (see `metrics_port`,
    `health_probe_port`). ``leader_election`` None runs controllers without electing a leader.
    ``qps``/``burst`` pace the client (None: unlimited). ``clock`` is the one clock of
    everything the manager builds (see the module docstring).
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        leader_election: LeaderElection | None = None,
        metrics_bind_address: str | None = ":8080",
        health_probe_bind_address: str | None = ":8081",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        qps: float | None = None,
        burst: int = 10,
        cache_sync_timeout: float = 120.0,
        graceful_shutdown_timeout: float = 25.0,
        resync_period: float | None = None,
        watch_read_timeout: float = DEFAULT_READ_TIMEOUT,
        transforms: dict[Resource, Transform] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.client = Client(
            api_client, request_timeout=request_timeout, qps=qps, burst=burst, clock=self.clock
        )
        self.cache = Cache(
            self.client,
            transforms=transforms,
            resync_period=resync_period,
            read_timeout=watch_read_timeout,
            clock=self.clock,
        )
        self._leader_election = leader_election
        self._elector = (
            LeaderElector(self.client, leader_election, clock=self.clock)
            if leader_election
            else None
        )
        self._healthz: dict[str, Check] = {"manager": lambda: self._running}
        self._readyz: dict[str, Check] = {"caches": self.ready}
        self._metrics_server, self._probe_server = self._servers(
            metrics_bind_address, health_probe_bind_address
        )
        self._events = EventSink(self.client, clock=self.clock)
        self._cache_sync_timeout = cache_sync_timeout
        self._graceful_timeout = graceful_shutdown_timeout
        self._runnables: list[Runnable] = [self._events]
        self._controller_names: set[str] = set()
        self._synced = False
        self._running = False
        self._deadline = 0.0  # clock time the shutdown budget ends (set when shutdown begins)

    def _servers(
        self, metrics_address: str | None, probe_address: str | None
    ) -> tuple[HttpServer | None, HttpServer | None]:
        probes: dict[str, Handler] = {
            "/healthz": probe(self._healthz, 500),
            "/readyz": probe(self._readyz, 503),
        }
        if metrics_address == probe_address and metrics_address is not None:
            if parse_bind_address(metrics_address)[1] == 0:  # two free ports, not one
                return (
                    HttpServer(*parse_bind_address(metrics_address), {"/metrics": metrics}),
                    HttpServer(*parse_bind_address(metrics_address), probes),
                )
            both = HttpServer(*parse_bind_address(metrics_address), {"/metrics": metrics, **probes})
            return both, both
        return (
            None
            if metrics_address is None
            else HttpServer(*parse_bind_address(metrics_address), {"/metrics": metrics}),
            None
            if probe_address is None
            else HttpServer(*parse_bind_address(probe_address), probes),
        )

    @classmethod
    async def create(
        cls,
        kubeconfig: str | Path | None = None,
        *,
        configuration: k8s_client.Configuration | None = None,
        **options: Any,
    ) -> Manager:
        """A manager on a new API client (see `new_api_client` for where the config comes
        from); ``options`` are those of the constructor."""
        return cls(await new_api_client(kubeconfig, configuration=configuration), **options)

    @property
    def metrics_port(self) -> int | None:
        """The port ``/metrics`` is served on, once started (None: not served)."""
        return None if self._metrics_server is None else self._metrics_server.port

    @property
    def health_probe_port(self) -> int | None:
        """The port ``/healthz`` and ``/readyz`` are served on, once started (None: not served)."""
        return None if self._probe_server is None else self._probe_server.port

    @property
    def is_leader(self) -> bool:
        """Whether this manager currently runs its leader runnables."""
        return self._elector.is_leader if self._elector else self._synced

    def ready(self) -> bool:
        """Whether the caches have synced (the built-in check of ``/readyz``)."""
        return self._synced

    def add_healthz_check(self, name: str, check: Check) -> None:
        """Make ``/healthz`` fail while ``check()`` (a bool or an awaitable bool) is False.
        Besides these, ``/healthz`` fails while the manager is not running (stopping)."""
        _add_check(self._healthz, name, check)

    def add_readyz_check(self, name: str, check: Check) -> None:
        """Make ``/readyz`` fail while ``check()`` is False (it also waits for the caches)."""
        _add_check(self._readyz, name, check)

    def event_recorder(self, component: str) -> EventRecorder:
        """An `EventRecorder` reporting as ``component``; its Events are sent in the
        background by this manager (on every replica) through one spam filter."""
        return EventRecorder(self._events, component)

    def add(self, runnable: Runnable) -> None:
        """Run ``runnable`` with the manager (add before `start`). Controllers' names must be
        unique (``ValueError``): they label metrics and logs."""
        if isinstance(runnable, Controller):
            if runnable.name in self._controller_names:
                raise ValueError(f"a controller named {runnable.name!r} was already added")
            self._controller_names.add(runnable.name)
        self._runnables.append(runnable)

    def add_controller(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        for_: Resource,
        **options: Unpack[ControllerOptions],
    ) -> Controller:
        """Build a controller on this manager's cache (see `build_controller` for ``options``)
        and add it; it drains for at most the manager's graceful shutdown timeout."""
        if name in self._controller_names:
            raise ValueError(f"a controller named {name!r} was already added")
        controller = build_controller(
            self.cache,
            name,
            reconciler,
            for_=for_,
            drain_timeout=self._graceful_timeout,
            **options,
        )
        self.add(controller)
        return controller

    async def run(self) -> None:
        """`start` until SIGTERM or SIGINT; a second signal exits the process at once."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if stop.is_set():
                os._exit(1)
            log.info("signal received; shutting down")
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            await self.start(stop)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def start(self, stop: asyncio.Event) -> None:
        """Start everything in order and run until ``stop`` is set; then shut down in reverse
        and close the API client. Raises `LeaderElectionLost` when the Lease was lost, or the
        error of a runnable that failed."""
        leader_stop, renew_stop, base_stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
        base: list[asyncio.Task[None]] = []
        leaders: list[asyncio.Task[None]] = []
        holding: asyncio.Task[bool] | None = None
        lost = False
        self._running = True
        try:
            for server in {s for s in (self._metrics_server, self._probe_server) if s}:
                await server.start()
            early = [r for r in self._runnables if not getattr(r, "needs_cache", True)]
            base += [asyncio.create_task(r.start(base_stop)) for r in early]
            base.append(asyncio.create_task(self.cache.start(base_stop)))
            if not await self._until(self._sync(), stop, base):
                return
            for runnable in self._runnables:
                if not runnable.needs_leader and runnable not in early:
                    base.append(asyncio.create_task(runnable.start(base_stop)))
            if self._elector and not await self._until(self._elector.acquire(stop), stop, base):
                return
            for runnable in self._runnables:
                if runnable.needs_leader:
                    leaders.append(asyncio.create_task(runnable.start(leader_stop)))
            if self._elector is not None:
                holding = asyncio.create_task(self._elector.hold(renew_stop))
            waiting = asyncio.shield(holding) if holding else stop.wait()
            lost = await self._until(waiting, stop, base + leaders) is False
        finally:
            self._running = False
            lost = await self._shutdown(leader_stop, leaders, holding, renew_stop, lost) or lost
            await self._shutdown_base(base_stop, base)
        if lost:
            election = self._leader_election
            assert election is not None
            raise LeaderElectionLost(
                f"lost the lease {election.namespace}/{election.name} as {election.identity}"
            )

    async def _sync(self) -> bool:
        try:
            async with asyncio.timeout(self._cache_sync_timeout):
                await self.cache.wait_for_sync()
        except TimeoutError:
            raise TimeoutError(
                f"caches did not sync within {self._cache_sync_timeout} s (see the informer logs)"
            ) from None
        self._synced = True
        log.info("caches synced")
        return True

    async def _until(
        self,
        step: Coroutine[Any, Any, Any] | asyncio.Future[Any],
        stop: asyncio.Event,
        running: list[asyncio.Task[None]],
    ) -> Any:
        """``step``'s result, or None when ``stop`` is set first; re-raises a runnable's error."""
        stepping = asyncio.ensure_future(step)
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([stepping, stopping, *running], return_when=asyncio.FIRST_COMPLETED)
            for task in running:
                if task.done():
                    task.result()  # a runnable failed (or returned early): raise its error
                    raise RuntimeError(f"a runnable stopped on its own: {task.get_coro()!r}")
            return stepping.result() if stepping.done() else None
        finally:
            stepping.cancel()
            stopping.cancel()
            await asyncio.gather(stepping, stopping, return_exceptions=True)

    async def _shutdown(
        self,
        leader_stop: asyncio.Event,
        leaders: list[asyncio.Task[None]],
        holding: asyncio.Task[bool] | None,
        renew_stop: asyncio.Event,
        lost: bool,
    ) -> bool:
        """Drain the leader runnables while the Lease is renewed (cancel them at once when it
        is lost), then stop renewing and release; whether the Lease was lost."""
        self._synced = False
        self._deadline = self.clock.now() + self._graceful_timeout
        if lost:
            for task in leaders:  # the lease is gone: not one more reconcile
                task.cancel()
        leader_stop.set()
        draining = asyncio.ensure_future(_finish(leaders, self._left(), self.clock))
        if holding is not None and not lost:
            await asyncio.wait([draining, holding], return_when=asyncio.FIRST_COMPLETED)
            if not draining.done():  # renewal ended first: the lease was lost mid-drain
                lost = True
                for task in leaders:
                    task.cancel()
        await draining
        renew_stop.set()
        if holding is not None:
            lost = (await asyncio.gather(holding, return_exceptions=True))[0] is False or lost
        if self._elector is not None and not lost:
            await self._elector.release()
        return lost

    async def _shutdown_base(
        self, base_stop: asyncio.Event, base: list[asyncio.Task[None]]
    ) -> None:
        base_stop.set()
        await _finish(base, self._left(), self.clock)
        for server in {s for s in (self._metrics_server, self._probe_server) if s}:
            await server.stop()
        await self.client.api_client.close()
        log.info("manager stopped")

    def _left(self) -> float:
        """Seconds left of the shutdown budget (at least a moment, to cancel cleanly)."""
        return max(self._deadline - self.clock.now(), 0.0)


def _add_check(checks: dict[str, Check], name: str, check: Check) -> None:
    if name in checks:
        raise ValueError(f"a check named {name!r} was already added")
    checks[name] = check


async def _finish(tasks: list[asyncio.Task[None]], seconds: float, clock: Clock) -> None:
    """Wait up to ``seconds`` on ``clock`` for ``tasks`` to return, then cancel the rest; log
    their errors."""
    if not tasks:
        return
    pending = await clock.wait_tasks(tasks, seconds)
    for task in pending:
        task.cancel()
    for result in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(result, Exception):
            log.error("runnable failed during shutdown: %r", result)
