"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

A candidate tries every ``retry_period`` (jittered up to +10 %) to take the Lease: it may when
the Lease is absent, held by nobody (released), or held by another identity whose record has
not changed for ``leaseDurationSeconds`` as measured on the candidate's own clock (so clock
skew between machines does not matter) from when it first saw that record: when the GET that
carried it returned, however long the GET took. Writes are compare-and-swap on
resourceVersion, so two candidates never both win. The leader renews every ``retry_period``; if
it cannot renew for ``renew_deadline`` seconds, or sees another holder, it has lost.
`LeaderElector.release` (on clean shutdown, after every leader runnable stopped: the manager
keeps renewing until then) clears the holder, so a standby takes over at its next try.
``leader_election_master_status`` is 1 while this process leads.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Gauge

from ._client import Client
from ._clock import Clock, SystemClock
from ._errors import TRANSIENT_ERRORS, AlreadyExists, ApiError, Conflict, NotFound
from ._jitter import jittered
from ._kubeconfig import pod_namespace
from ._metrics import METRICS_REGISTRY
from ._resources import Resource
from ._timestamps import kube_micro_time

__all__ = ["LEASES", "LeaderElection", "LeaderElector", "default_identity"]

log = logging.getLogger("gpuctrl.runtime.leader")

LEASES = Resource("coordination.k8s.io/v1", "Lease", "leases")
_FAILURES = (*TRANSIENT_ERRORS, ApiError)
_MASTER = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
    registry=METRICS_REGISTRY,
)


def default_identity() -> str:
    """``<hostname>_<uuid4>``, unique per process, like controller-runtime's."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElection:
    """Where the Lease lives and the timings (client-go's defaults: 15 s, 10 s, 2 s).

    ``namespace`` defaults to the pod's own (`pod_namespace`: ``$POD_NAMESPACE`` or the service
    account's namespace file); outside a pod it must be given (``ValueError`` otherwise).
    """

    name: str
    namespace: str = ""
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.namespace:
            namespace = pod_namespace()
            if namespace is None:
                raise ValueError(
                    f"leader election lease {self.name!r} needs a namespace: not running in a "
                    "pod (no $POD_NAMESPACE, no service account namespace file), so pass "
                    "LeaderElection(name, namespace=...)"
                )
            object.__setattr__(self, "namespace", namespace)
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > retry_period > 0, got "
                f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period}"
            )


class LeaderElector:
    """Campaigns for, holds and releases one Lease for one identity."""

    def __init__(self, client: Client, config: LeaderElection, *, clock: Clock | None = None):
        self.config = config
        self._client = client
        self._clock = clock or SystemClock()
        self._observed: tuple[Any, ...] = ()  # the holder record last seen ...
        self._observed_at = 0.0  # ... and when (clock.now(), after the GET) it was first seen
        self._master = _MASTER.labels(config.name)
        self.is_leader = False

    @property
    def is_leader(self) -> bool:
        """Whether this identity holds the Lease (as far as it knows)."""
        return self._is_leader

    @is_leader.setter
    def is_leader(self, value: bool) -> None:
        self._is_leader = value
        self._master.set(1 if value else 0)

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Try until this identity holds the Lease (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if await self._try_once() is True:
                self.is_leader = True
                log.info("became leader of lease %s as %s", self._lease_name, self.config.identity)
                return True
            await self._clock.wait(stop, self._jittered_retry())
        return False

    async def hold(self, stop: asyncio.Event) -> bool:
        """Renew until ``stop`` is set (True) or the lease is lost (False)."""
        last_renewal = self._clock.now()
        while not await self._clock.wait(stop, self.config.retry_period):
            left = self.config.renew_deadline - (self._clock.now() - last_renewal)
            renewed = await self._try_once(time_limit=max(left, 0.1))
            if renewed is True:
                last_renewal = self._clock.now()
            elif renewed is False or self._clock.now() - last_renewal >= self.config.renew_deadline:
                self.is_leader = False
                log.error("lost leadership of lease %s", self._lease_name)
                return False
        return True

    async def release(self) -> None:
        """Give the Lease up if this identity holds it (best effort, bounded by renew_deadline)."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                lease = await self._client.get(LEASES, self.config.name, self.config.namespace)
                if lease["spec"].get("holderIdentity") != self.config.identity:
                    return
                lease["spec"].update(holderIdentity=None, leaseDurationSeconds=1)
                await self._client.replace(LEASES, lease)
            log.info("released lease %s", self._lease_name)
        except _FAILURES as error:
            log.warning("could not release lease %s: %r", self._lease_name, error)

    @property
    def _lease_name(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    def _jittered_retry(self) -> float:
        return jittered(self.config.retry_period)

    async def _try_once(self, time_limit: float | None = None) -> bool | None:
        """One attempt to take or renew: True when held, False when another holder has a valid
        lease, None when the attempt failed (API error, timeout, lost write race)."""
        try:
            async with asyncio.timeout(time_limit or self.config.renew_deadline):
                return await self._take_or_renew()
        except Conflict:
            return None
        except _FAILURES as error:
            log.warning("lease %s: %r", self._lease_name, error)
            return None

    async def _take_or_renew(self) -> bool:
        now = self._clock.now()
        try:
            lease = await self._client.get(LEASES, self.config.name, self.config.namespace)
        except NotFound:
            try:
                await self._client.create(LEASES, self._new_lease(None))
            except AlreadyExists:
                return False
            return True
        spec = lease.get("spec") or {}
        record = tuple(sorted((k, str(v)) for k, v in spec.items()))
        if record != self._observed:
            # Seen now, after the response (as client-go's observedTime): a GET that spans the
            # holder's renewal must not date the renewal back to when the request was sent.
            self._observed, self._observed_at = record, self._clock.now()
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds") or self.config.lease_duration
        if holder and holder != self.config.identity and now < self._observed_at + duration:
            return False
        await self._client.replace(LEASES, self._new_lease(lease))
        return True

    def _new_lease(self, current: dict[str, Any] | None) -> dict[str, Any]:
        stamp = kube_micro_time()
        spec = (current or {}).get("spec") or {}
        still_mine = spec.get("holderIdentity") == self.config.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if still_mine else 1)
        lease = current or {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
        }
        lease["spec"] = {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": round(self.config.lease_duration),
            "acquireTime": spec["acquireTime"] if still_mine else stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions if current else 0,
        }
        return lease
