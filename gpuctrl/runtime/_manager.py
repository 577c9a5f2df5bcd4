"""The manager: one API client, the shared cache, controllers and other runnables.

Start order (`Manager.start`):

1. the HTTP server (``/healthz``, ``/readyz``, ``/metrics``), so probes answer from the start;
2. the caches, waiting until every informer has synced (``/readyz`` turns 200 then);
3. runnables that do not need the leader;
4. with leader election: campaign for the Lease, then the runnables that need the leader
   (controllers); without: those at once.

Shutdown (``stop`` set, SIGTERM/SIGINT under `Manager.run`, or a runnable failed) goes the
other way: leader runnables stop taking work and drain their in-flight reconciles (bounded by
``graceful_shutdown_timeout``), the Lease is released, the other runnables, the caches and the
HTTP server stop, and the API client is closed. Losing the Lease cancels the controllers at
once, shuts down the same way and raises `LeaderElectionLost`.

Time: one `Clock` (``clock``, `SystemClock` unless given) flows from the manager to the cache's
informers (resyncs, reflector backoff), the controllers (queue delays, rate limits, drain), the
leader election (retry, renew deadline) and the shutdown bound. Deadlines on real I/O (each
request's ``request_timeout``, ``cache_sync_timeout``) stay in real seconds: a fake clock that
jumps ahead while the loop waits on a socket must not fail a request that is merely slow.
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
from ._client import DEFAULT_REQUEST_TIMEOUT, Client, Resource, new_api_client
from ._clock import Clock, SystemClock
from ._controller import Controller, Reconciler
from ._errors import LeaderElectionLost
from ._http import ProbeServer
from ._informer import Transform
from ._leader import LeaderElection, LeaderElector

__all__ = ["Manager", "Runnable"]

log = logging.getLogger("gpuctrl.runtime.manager")


class Runnable(Protocol):
    """Something a manager runs: ``start(stop)`` returns once ``stop`` is set (and cleaned up);
    ``needs_leader`` says whether it may only run while this process leads."""

    needs_leader: bool

    async def start(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set."""


class Manager:
    """Runs a cache, controllers and runnables on one API client, which it owns and closes.

    ``http_port`` None serves no HTTP; 0 picks a free port (see `http_port`).
    ``leader_election`` None runs controllers without electing a leader.
    ``clock`` is the one clock of everything the manager builds (see the module docstring).
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        leader_election: LeaderElection | None = None,
        http_host: str = "0.0.0.0",
        http_port: int | None = 8080,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        cache_sync_timeout: float = 120.0,
        graceful_shutdown_timeout: float = 30.0,
        resync_period: float | None = None,
        transforms: dict[Resource, Transform] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.client = Client(api_client, request_timeout=request_timeout)
        self.cache = Cache(
            self.client, transforms=transforms, resync_period=resync_period, clock=self.clock
        )
        self._leader_election = leader_election
        self._elector = (
            LeaderElector(self.client, leader_election, clock=self.clock)
            if leader_election
            else None
        )
        self._probes = None if http_port is None else ProbeServer(http_host, http_port, self.ready)
        self._cache_sync_timeout = cache_sync_timeout
        self._graceful_timeout = graceful_shutdown_timeout
        self._runnables: list[Runnable] = []
        self._synced = False

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
    def http_port(self) -> int | None:
        """The port the HTTP server listens on, once started."""
        return None if self._probes is None else self._probes.port

    @property
    def is_leader(self) -> bool:
        """Whether this manager currently runs its leader runnables."""
        return self._elector.is_leader if self._elector else self._synced

    def ready(self) -> bool:
        """Whether the caches have synced (what ``/readyz`` reports)."""
        return self._synced

    def add(self, runnable: Runnable) -> None:
        """Run ``runnable`` with the manager (add before `start`)."""
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
        leader_stop, base_stop = asyncio.Event(), asyncio.Event()
        base: list[asyncio.Task[None]] = []
        leaders: list[asyncio.Task[None]] = []
        try:
            if self._probes is not None:
                await self._probes.start()
            base.append(asyncio.create_task(self.cache.start(base_stop)))
            if not await self._until(self._sync(), stop, base):
                return
            for runnable in self._runnables:
                if not runnable.needs_leader:
                    base.append(asyncio.create_task(runnable.start(base_stop)))
            if self._elector and not await self._until(self._elector.acquire(stop), stop, base):
                return
            for runnable in self._runnables:
                if runnable.needs_leader:
                    leaders.append(asyncio.create_task(runnable.start(leader_stop)))
            holding = self._elector.hold(stop) if self._elector else stop.wait()
            if await self._until(holding, stop, base + leaders) is False:
                for task in leaders:  # the lease is gone: not one more reconcile
                    task.cancel()
                election = self._leader_election
                assert election is not None
                raise LeaderElectionLost(
                    f"lost the lease {election.namespace}/{election.name} as {election.identity}"
                )
        finally:
            await self._shutdown(leader_stop, leaders, base_stop, base)

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
        self, step: Coroutine[Any, Any, Any], stop: asyncio.Event, running: list[asyncio.Task[None]]
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
        base_stop: asyncio.Event,
        base: list[asyncio.Task[None]],
    ) -> None:
        self._synced = False
        leader_stop.set()
        await _finish(leaders, self._graceful_timeout, self.clock)
        if self._elector is not None:
            await self._elector.release()
        base_stop.set()
        await _finish(base, self._graceful_timeout, self.clock)
        if self._probes is not None:
            await self._probes.stop()
        await self.client.api_client.close()
        log.info("manager stopped")


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
